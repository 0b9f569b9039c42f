#include "actkit/comm/group_config.h"

#include <c10/util/StringUtil.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "actkit/core/enum_names.h"
#include "actkit/core/errors.h"
#include "actkit/core/files.h"

namespace actkit {
namespace {

// The integer in environment variable `name`, or `fallback` when unset.
long env_int(const char* name, long fallback, bool required) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    if (required) throw InvalidInput(c10::str("environment variable ", name, " is not set"));
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    throw InvalidInput(c10::str("environment variable ", name, "='", text, "' is not an integer"));
  }
  return value;
}

}  // namespace

namespace {
constexpr EnumName<CommBackend> kBackendNames[] = {{CommBackend::kGloo, "gloo"}, {CommBackend::kNccl, "nccl"}};
}  // namespace

const char* to_string(CommBackend backend) { return enum_name(kBackendNames, backend); }

CommBackend parse_comm_backend(const std::string& text) { return parse_enum(kBackendNames, text, "backend"); }

void check_link_backend(LinkMode mode, CommBackend backend) {
  if (mode == LinkMode::kKernel && backend == CommBackend::kNccl) {
    throw InvalidInput("--link kernel shapes TCP between network namespaces; NCCL's GPU transports bypass it: "
                       "use --link process with --backend nccl");
  }
}

bool comm_backend_available(CommBackend backend) {
#ifdef ACTKIT_WITH_NCCL
  (void)backend;
  return true;
#else
  return backend == CommBackend::kGloo;
#endif
}

void GroupConfig::validate() const {
  if (world_size < 1) throw InvalidInput(c10::str("world size must be >= 1, got ", world_size));
  if (rank < 0 || rank >= world_size) {
    throw InvalidInput(c10::str("rank ", rank, " is outside the group of ", world_size));
  }
  if (master_port < 1 || master_port > 65535) {
    throw InvalidInput(c10::str("master port must be in 1..65535, got ", master_port));
  }
  if (master_addr.empty()) throw InvalidInput("master address is empty");
  if (timeout.count() <= 0) throw InvalidInput("the communication timeout must be positive");
  if (!comm_backend_available(backend)) {
    throw InvalidInput(c10::str("backend ", to_string(backend), ": this ACTkit was built against a LibTorch without ",
                                "CUDA or without c10d's NCCL group; use gloo"));
  }
}

std::chrono::seconds comm_timeout_from_env() {
  const long s = env_int("ACTKIT_COMM_TIMEOUT", 300, false);
  if (s <= 0) throw InvalidInput(c10::str("environment variable ACTKIT_COMM_TIMEOUT=", s, ": seconds, > 0"));
  return std::chrono::seconds(s);
}

bool GroupConfig::in_env() { return std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr; }

GroupConfig GroupConfig::from_env() {
  GroupConfig c;
  c.rank = int(env_int("RANK", 0, true));
  c.world_size = int(env_int("WORLD_SIZE", 1, true));
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') c.master_addr = addr;
  c.master_port = int(env_int("MASTER_PORT", 29500, false));
  c.timeout = comm_timeout_from_env();
  if (const char* local = std::getenv("ACTKIT_LOCAL_STORE"); local != nullptr && std::string(local) == "1") {
    c.store_file = files::temp_directory() + "/actkit-store";
  }
  if (const char* b = std::getenv("ACTKIT_COMM_BACKEND"); b != nullptr && *b != '\0') c.backend = parse_comm_backend(b);
  c.validate();
  return c;
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  return ok ? ntohs(a.sin_port) : 29500;
}

}  // namespace actkit
