// An IoEngine for tests that injects faults into the writes of chosen
// record keys (see FaultyEngine); shared by the record-store and
// example-store tests.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actkit/core/errors.h"
#include "actkit/swap/io_engine.h"

namespace actkit {

// Passes requests on to a real engine, except the next write of a chosen key:
// a byte range of it never reaches the file (the process died with those
// chunks still queued) and, if asked, the write then fails with EIO (a
// device error partway through the record).
class FaultyEngine : public IoEngine {
 public:
  struct Fault {
    uint64_t skip_from = 0;  // bytes [skip_from, skip_to) of the request are not written
    uint64_t skip_to = UINT64_MAX;
    bool eio = false;
    int error_number = EIO;  // what the failing write reports (EIO, ENOSPC, ...)
  };

  explicit FaultyEngine(std::shared_ptr<IoEngine> inner) : IoEngine(inner->options(), ""), inner_(std::move(inner)) {}

  void inject(const std::string& key, Fault f) {
    std::lock_guard<std::mutex> lock(mu_);
    faults_[key] = f;
  }

  const char* name() const override { return inner_->name(); }
  int add_file(int fd, bool direct, const std::string& path) override { return inner_->add_file(fd, direct, path); }
  void remove_file(int file) override { inner_->remove_file(file); }

  IoTicket write(int file, uint64_t offset, const void* data, size_t len, const std::string& label) override {
    std::lock_guard<std::mutex> lock(mu_);
    Request r;
    auto f = faults_.find(label);
    if (f == faults_.end()) {
      r.parts.push_back(inner_->write(file, offset, data, len, label));
    } else {
      const uint64_t from = std::min<uint64_t>(f->second.skip_from, len);
      const uint64_t to = std::max(from, std::min<uint64_t>(f->second.skip_to, len));
      const auto* p = static_cast<const uint8_t*>(data);
      if (from > 0) r.parts.push_back(inner_->write(file, offset, p, from, label));
      if (to < len) r.parts.push_back(inner_->write(file, offset + to, p + to, len - to, label));
      r.eio = f->second.eio;
      r.error_number = f->second.error_number;
      r.label = label;
      faults_.erase(f);
    }
    requests_[next_] = std::move(r);
    return next_++;
  }

  IoTicket read(int file, uint64_t offset, void* into, size_t len, const std::string& label) override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_[next_].parts.push_back(inner_->read(file, offset, into, len, label));
    return next_++;
  }

  void wait(IoTicket ticket) override {
    Request r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = requests_.find(ticket);
      if (it == requests_.end()) throw InvalidInput("unknown ticket");
      r = std::move(it->second);
      requests_.erase(it);
    }
    for (IoTicket p : r.parts) inner_->wait(p);
    if (r.eio) {
      throw IoError(std::string("injected ") + std::strerror(r.error_number) + " writing '" + r.label + "'",
                    r.error_number);
    }
  }

  bool ready(IoTicket ticket) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (IoTicket p : requests_.at(ticket).parts) {
      if (!inner_->ready(p)) return false;
    }
    return true;
  }

 private:
  struct Request {
    std::vector<IoTicket> parts;
    bool eio = false;
    int error_number = EIO;
    std::string label;
  };
  std::shared_ptr<IoEngine> inner_;
  std::mutex mu_;
  std::map<std::string, Fault> faults_;
  std::map<IoTicket, Request> requests_;
  IoTicket next_ = 1;
};

}  // namespace actkit
