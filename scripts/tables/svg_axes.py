"""The frame the benchmark plots share: a white page, a title, five grid
lines with the y values, the x ticks (when asked) and the x label, and the
room on the right for a legend. Standard library only; the table scripts
beside it import it (python3 puts a script's own folder on the path)."""

COLORS = ["#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
          "#bcbd22", "#393b79", "#ad494a", "#637939", "#7f7f7f", "#7b4173", "#3182bd"]


class Axes:
    """x in [0, x_hi], y in [lo_y, hi_y] (a value above hi_y is drawn at it) on a w × h page."""

    def __init__(self, x_hi, lo_y, hi_y, w=900, h=480, left=70, right=230, top=30, bottom=45):
        self.x_hi, self.lo_y = x_hi if x_hi > 0 else 1, lo_y
        self.hi_y = hi_y if hi_y > lo_y else lo_y + 1
        self.w, self.h, self.left, self.right, self.top, self.bottom = w, h, left, right, top, bottom

    def x(self, v):
        return self.left + (self.w - self.left - self.right) * v / self.x_hi

    def y(self, v):
        return self.top + (self.h - self.top - self.bottom) * (1 - (min(v, self.hi_y) - self.lo_y) /
                                                               (self.hi_y - self.lo_y))

    def legend_x(self):
        return self.w - self.right

    def frame(self, title, x_label, x_ticks=True):
        """The SVG's first parts: the page, the title, the grid, the ticks and the x label."""
        w, h, left, right = self.w, self.h, self.left, self.right
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
                 f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
                 f'<text x="{left}" y="18" font-size="13">{title}</text>']
        for k in range(5):
            v = self.lo_y + (self.hi_y - self.lo_y) * k / 4
            parts.append(f'<line x1="{left}" x2="{w - right}" y1="{self.y(v):.1f}" y2="{self.y(v):.1f}" '
                         f'stroke="#ddd"/><text x="{left - 6}" y="{self.y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
            if x_ticks:
                t = self.x_hi * k / 4
                parts.append(f'<text x="{self.x(t):.1f}" y="{h - self.bottom + 16}" text-anchor="middle">{t:.0f}</text>')
        parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 8}" text-anchor="middle">{x_label}</text>')
        return parts
