// The collective watchdog (watchdog.h): the main thread's waiting state, the MPI profiling
// wrappers that record it, the start-up exchange of the monitor's address, and the
// watchdog thread (heartbeats to the monitor, the monitor's verdicts).
#include "parallel/watchdog.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace colonnade {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double Secs(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

// ---- the main thread's state, written by the wrappers, read by the watchdog thread ------
struct MainState {
  std::atomic<bool> active{false};
  std::atomic<int64_t> wait_start_ns{0};  // 0: not waiting in a blocking call
  std::atomic<const char*> call{nullptr};
  std::atomic<const char*> label{nullptr};
  std::atomic<int64_t> step{-1};
  std::atomic<int64_t> entered{0};  // blocking calls entered while active
  std::atomic<int64_t> wrapped{0};  // wrapped calls ever made (the wrappers are linked)
  int depth = 0;                    // main thread only
};
MainState g_main;

// Entered by every wrapped call: the outermost one of the main thread records the wait.
class Waiting {
 public:
  explicit Waiting(const char* call) : armed_(g_main.active.load(std::memory_order_relaxed)) {
    g_main.wrapped.fetch_add(1, std::memory_order_relaxed);
    if (!armed_) return;
    if (g_main.depth++ == 0) {
      g_main.call.store(call, std::memory_order_relaxed);
      g_main.entered.fetch_add(1, std::memory_order_relaxed);
      g_main.wait_start_ns.store(NowNs(), std::memory_order_release);
    }
  }
  ~Waiting() {
    if (armed_ && --g_main.depth == 0) g_main.wait_start_ns.store(0, std::memory_order_release);
  }
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  bool armed_;
};

// ---- wire format ----------------------------------------------------------------------------
constexpr uint32_t kMagic = 0x43574447;  // "CWDG"
enum Kind : uint32_t { kHeartbeat = 1, kAck = 2, kVerdict = 3 };
constexpr int kMaxAddrs = 8;
constexpr int kHostLen = 64;

struct Packet {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  uint64_t job_key = 0;
  int32_t rank = 0;
  int32_t dest_index = 0;  // which of the monitor's addresses it was sent to (echoed)
  int64_t step = -1;
  int64_t entered = 0;
  int64_t waited_ms = -1;  // -1: not waiting in a blocking call
  char text[400] = {};     // heartbeat: the call and its label; verdict: the message
};

// What each rank tells the monitor at start-up, and what the monitor tells every rank.
struct RankCard {
  char host[kHostLen] = {};
  int32_t pid = 0;
  int32_t pad = 0;
};
struct MonitorCard {
  uint64_t job_key = 0;
  int32_t port = 0;  // host order
  int32_t naddr = 0;
  uint32_t addr[kMaxAddrs] = {};  // network order; non-loopback first
  uint32_t mask[kMaxAddrs] = {};
};

std::string Hostname() {
  char h[kHostLen] = {};
  gethostname(h, sizeof(h) - 1);
  return h;
}

// The host's IPv4 addresses that are up, non-loopback first.
void LocalAddresses(MonitorCard* card) {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  std::vector<std::pair<uint32_t, uint32_t>> outer, loop;
  for (struct ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    const uint32_t a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    const uint32_t m =
        i->ifa_netmask ? reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr : 0;
    ((i->ifa_flags & IFF_LOOPBACK) ? loop : outer).emplace_back(a, m);
  }
  freeifaddrs(list);
  outer.insert(outer.end(), loop.begin(), loop.end());
  card->naddr = 0;
  for (const auto& [a, m] : outer) {
    if (card->naddr == kMaxAddrs) break;
    card->addr[card->naddr] = a;
    card->mask[card->naddr] = m;
    card->naddr++;
  }
}

// Writes one line to stderr without locks (the main thread may hold stdio's).
void WriteLine(const std::string& line) {
  std::string s = line + "\n";
  for (size_t off = 0; off < s.size();) {
    ssize_t n = write(2, s.data() + off, s.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

// Writes the line, then ends the process at once: no destructor, no MPI call can block it.
[[noreturn]] void Die(const std::string& line, int code) {
  WriteLine(line);
  _exit(code);
}

std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return absl::StrFormat("rank %d", ranks[0]);
  return "ranks " + absl::StrJoin(ranks, ", ");
}

// ---- the watchdog thread ----------------------------------------------------------------------
struct PeerState {
  int64_t last_heard_ns = 0;
  bool heard = false;
  Packet last;
  sockaddr_in from{};
};

class Watchdog {
 public:
  Watchdog(const WatchdogOptions& o, int rank, int size, int fd, const MonitorCard& monitor,
           std::vector<RankCard> cards, RankCard monitor_card)
      : o_(o),
        rank_(rank),
        size_(size),
        fd_(fd),
        monitor_(monitor),
        cards_(std::move(cards)),
        monitor_rank_card_(monitor_card) {
    timeout_ns_ = static_cast<int64_t>(o.timeout_s * 1e9);
    double hb = o.heartbeat_s > 0 ? o.heartbeat_s : std::clamp(o.timeout_s / 10, 0.05, 2.0);
    heartbeat_ns_ = static_cast<int64_t>(hb * 1e9);
    quiet_ns_ = std::min(timeout_ns_, std::max<int64_t>(3 * heartbeat_ns_, 2000000000));
    start_ns_ = NowNs();
    peers_.resize(size);
    for (PeerState& p : peers_) p.last_heard_ns = start_ns_;
    last_reply_ns_ = start_ns_;
    me_ = Hostname();
  }

  void Run() {
    int64_t next_tick = NowNs(), last_loop = NowNs();
    while (!stop_.load(std::memory_order_acquire)) {
      const int64_t now = NowNs();
      if (now - last_loop > quiet_ns_) {
        // This process was stopped (SIGSTOP, a debugger) or starved of the CPU: what it
        // knows of the others is stale, and they have been judging it meanwhile. Read what
        // came (a verdict naming it ends it here), then start counting again; the monitor
        // also holds its verdicts for a timeout, as the others may be naming it now.
        Receive();
        for (PeerState& p : peers_) p.last_heard_ns = now;
        last_reply_ns_ = now;
        hold_until_ns_ = now + timeout_ns_;
      }
      last_loop = now;
      if (now >= next_tick) {
        if (rank_ == 0) {
          if (now >= hold_until_ns_) Judge(now);
        } else {
          SendHeartbeat();
          if (now - last_reply_ns_ > timeout_ns_) MonitorSilent(now);
        }
        next_tick = now + heartbeat_ns_;
      }
      struct pollfd p = {fd_, POLLIN, 0};
      const int wait_ms = static_cast<int>(std::max<int64_t>(1, (next_tick - NowNs()) / 1000000));
      if (poll(&p, 1, std::min(wait_ms, 100)) > 0) Receive();
    }
    stopped_.store(true, std::memory_order_release);
  }
  void Stop() { stop_.store(true, std::memory_order_release); }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }

 private:
  // This rank's state as a heartbeat.
  Packet Own() const {
    Packet h;
    h.kind = kHeartbeat;
    h.job_key = monitor_.job_key;
    h.rank = rank_;
    h.step = g_main.step.load(std::memory_order_relaxed);
    h.entered = g_main.entered.load(std::memory_order_relaxed);
    const int64_t since = g_main.wait_start_ns.load(std::memory_order_acquire);
    if (since != 0) {
      h.waited_ms = std::max<int64_t>(0, (NowNs() - since) / 1000000);
      const char* call = g_main.call.load(std::memory_order_relaxed);
      const char* label = g_main.label.load(std::memory_order_relaxed);
      std::snprintf(h.text, sizeof(h.text), "%s%s%s%s", call ? call : "a blocking call",
                    label ? " (" : "", label ? label : "", label ? ")" : "");
    }
    return h;
  }

  void SendTo(const Packet& p, const sockaddr_in& to) {
    sendto(fd_, &p, sizeof(p), MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  }

  // To the monitor's address that answered, or to each of its addresses until one does.
  void SendHeartbeat() {
    Packet h = Own();
    for (int i = 0; i < monitor_.naddr; ++i) {
      if (locked_ >= 0 && i != locked_) continue;
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(static_cast<uint16_t>(monitor_.port));
      to.sin_addr.s_addr = monitor_.addr[i];
      h.dest_index = i;
      SendTo(h, to);
    }
  }

  void Receive() {
    for (int i = 0; i < 256; ++i) {
      Packet p;
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      ssize_t n =
          recvfrom(fd_, &p, sizeof(p), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
      if (n < 0) return;
      if (n != static_cast<ssize_t>(sizeof(p)) || p.magic != kMagic ||
          p.job_key != monitor_.job_key) {
        continue;  // another job's or a stray packet
      }
      p.text[sizeof(p.text) - 1] = 0;
      const int64_t now = NowNs();
      if (rank_ == 0 && p.kind == kHeartbeat && p.rank > 0 && p.rank < size_) {
        PeerState& peer = peers_[p.rank];
        peer.last_heard_ns = now;
        peer.heard = true;
        peer.last = p;
        peer.from = from;
        Packet ack;
        ack.kind = kAck;
        ack.job_key = monitor_.job_key;
        ack.dest_index = p.dest_index;
        SendTo(ack, from);
      } else if (rank_ != 0 && p.kind == kAck) {
        last_reply_ns_ = now;
        if (locked_ < 0 && p.dest_index >= 0 && p.dest_index < monitor_.naddr) {
          locked_ = p.dest_index;
        }
      } else if (rank_ != 0 && p.kind == kVerdict) {
        Die(Line(p.text), o_.exit_code);
      }
    }
  }

  std::string HostOf(int r) const {
    return r >= 0 && r < static_cast<int>(cards_.size()) ? std::string(cards_[r].host) : "?";
  }

  // "trainer: error on rank R (host H): <what>; --collective_timeout=T s: ending the job ..."
  std::string Line(const std::string& what) const {
    return absl::StrFormat(
        "%s: error on rank %d (host %s): %s; --collective_timeout=%g s ran out: every rank ends "
        "with exit code %d. Check that host (a crashed node, a stopped process, a cut network "
        "link, a rank stuck outside MPI), then run the job again: it resumes from the last "
        "checkpoint (docs/OPERATIONS.md, 'A lost node')",
        o_.program, rank_, me_, what, o_.timeout_s, o_.exit_code);
  }

  // The monitor's decision, every heartbeat interval.
  void Judge(int64_t now) {
    // The state of every rank now: the monitor's own directly, the others' from their
    // last heartbeat, their wait extended by the time since.
    struct View {
      bool silent = false;
      double silent_s = 0;
      double waited_s = -1;  // -1: outside any blocking call
      int64_t step = -1;
      std::string call;
    };
    std::vector<View> v(size_);
    const Packet own = Own();
    for (int r = 0; r < size_; ++r) {
      const Packet& p = r == 0 ? own : peers_[r].last;
      View& x = v[r];
      x.step = p.step;
      if (r != 0) {
        x.silent_s = Secs(now - peers_[r].last_heard_ns);
        x.silent = now - peers_[r].last_heard_ns > timeout_ns_;
      }
      if (p.waited_ms >= 0 && (r == 0 || peers_[r].heard)) {
        x.waited_s = p.waited_ms * 1e-3 + (r == 0 ? 0 : Secs(now - peers_[r].last_heard_ns));
        x.call = p.text;
      }
    }
    // A rank quiet for several heartbeat intervals has stopped, whatever it said last.
    auto quiet = [&](int r) { return r != 0 && now - peers_[r].last_heard_ns > quiet_ns_; };
    // The rank that has waited longest (among those still heard), for the message.
    int waiter = 0;
    for (int r = 0; r < size_; ++r) {
      if (!quiet(r) && v[r].waited_s > v[waiter].waited_s) waiter = r;
    }
    auto waiting_note = [&]() -> std::string {
      if (v[waiter].waited_s < 0) return "";
      return absl::StrFormat(" while rank %d (host %s) waited %.1f s in %s at step %d", waiter,
                             HostOf(waiter), v[waiter].waited_s, v[waiter].call, v[waiter].step);
    };
    std::vector<int> culprits;
    std::string why;
    bool any_silent = false;
    for (int r = 1; r < size_; ++r) any_silent = any_silent || v[r].silent;
    // One rank silent for the timeout ends the job; every rank gone quiet is named with it
    // (the ranks of a lost host fall silent together, their last heartbeats apart).
    for (int r = 1; r < size_ && any_silent; ++r) {
      if (quiet(r)) culprits.push_back(r);
    }
    if (!culprits.empty()) {
      double longest = 0;
      for (int r : culprits) longest = std::max(longest, v[r].silent_s);
      why = absl::StrFormat(
          "stopped answering: no heartbeat for %.1f s%s%s", longest,
          peers_[culprits[0]].heard
              ? absl::StrFormat(" (its last heartbeat: step %d)", v[culprits[0]].step)
              : " (never heard from)",
          waiting_note());
    } else if (v[waiter].waited_s * 1e9 > timeout_ns_) {
      // Somebody waits too long. The culprits are the ranks that went quiet (no heartbeat
      // for several intervals: the others may have been waiting for them since before they
      // stopped), else the ranks outside any collective (alive, busy elsewhere), else, if
      // every rank waits, those in the least common call.
      for (int r = 1; r < size_; ++r) {
        if (quiet(r)) culprits.push_back(r);
      }
      if (!culprits.empty()) {
        double longest = 0;
        for (int r : culprits) longest = std::max(longest, v[r].silent_s);
        why = absl::StrFormat(
            "stopped answering: no heartbeat for %.1f s (its last heartbeat: step %d)%s", longest,
            v[culprits[0]].step, waiting_note());
      } else {
        for (int r = 0; r < size_; ++r) {
          if (v[r].waited_s < 0) culprits.push_back(r);
        }
        if (!culprits.empty()) {
          why = absl::StrFormat(
              "did not join the others' collective: outside MPI at step %d (alive: its "
              "heartbeats arrive)%s",
              v[culprits[0]].step, waiting_note());
        } else {
          std::map<std::string, std::vector<int>> by_call;
          for (int r = 0; r < size_; ++r) by_call[v[r].call].push_back(r);
          auto fewest = std::min_element(by_call.begin(), by_call.end(), [](auto& a, auto& b) {
            return a.second.size() < b.second.size();
          });
          culprits = fewest->second;
          why = absl::StrFormat(
              "waits in %s while every rank waits in a collective (%d different calls): the "
              "ranks disagree on the collective, or MPI's connections between them failed%s",
              fewest->first, static_cast<int>(by_call.size()), waiting_note());
        }
      }
    } else {
      return;
    }
    Announce(culprits, why);
  }

  // The monitor's verdict: the culprits grouped by host ("ranks 2, 3 on host n2 stopped
  // answering: ..."), this rank's line, the verdict to every rank, then the exit.
  [[noreturn]] void Announce(const std::vector<int>& culprits, const std::string& why) {
    std::map<std::string, std::vector<int>> by_host;
    std::vector<std::string> order;
    for (int r : culprits) {
      if (!by_host.count(HostOf(r))) order.push_back(HostOf(r));
      by_host[HostOf(r)].push_back(r);
    }
    std::vector<std::string> parts;
    for (const std::string& h : order) {
      parts.push_back(absl::StrFormat("%s on host %s", RankList(by_host[h]), h));
    }
    const std::string verdict = absl::StrJoin(parts, " and ") + " " + why;
    Packet out;
    out.kind = kVerdict;
    out.job_key = monitor_.job_key;
    std::snprintf(out.text, sizeof(out.text), "%s", verdict.c_str());
    // This rank's line first (the launcher kills the others once one of them exits), then
    // the verdict three times (UDP), then a moment for the others to write theirs.
    WriteLine(Line(verdict));
    for (int repeat = 0; repeat < 3; ++repeat) {
      for (int r = 1; r < size_; ++r) {
        if (peers_[r].heard) SendTo(out, peers_[r].from);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(o_.exit_code);
  }

  // A rank that hears nothing from the monitor names it.
  void MonitorSilent(int64_t now) {
    const Packet own = Own();
    std::string note;
    if (own.waited_ms >= 0) {
      note = absl::StrFormat(" while this rank waited %.1f s in %s at step %d",
                             own.waited_ms * 1e-3, own.text, own.step);
    }
    WriteLine(Line(absl::StrFormat(
        "rank 0 on host %s (the watchdog's monitor) stopped answering: no reply for %.1f s%s; "
        "it, or the network between this host and it, failed",
        monitor_rank_card_.host, Secs(now - last_reply_ns_), note)));
    // The other ranks' clocks run out within a heartbeat of this one: give them time to
    // write their line before this rank's exit makes the launcher end them.
    std::this_thread::sleep_for(std::chrono::nanoseconds(heartbeat_ns_) +
                                std::chrono::milliseconds(300));
    _exit(o_.exit_code);
  }

  const WatchdogOptions o_;
  const int rank_, size_, fd_;
  const MonitorCard monitor_;
  const std::vector<RankCard> cards_;  // the monitor: every rank's; the others: empty
  const RankCard monitor_rank_card_;
  std::string me_;
  int64_t timeout_ns_ = 0, heartbeat_ns_ = 0, start_ns_ = 0;
  int64_t quiet_ns_ = 0;          // silence that means stopped: several heartbeats, 2 s at least
  int64_t hold_until_ns_ = 0;     // the monitor judges again from then (after its own freeze)
  std::vector<PeerState> peers_;  // the monitor's view of the others
  int64_t last_reply_ns_ = 0;     // the others: the monitor's last ack
  int locked_ = -1;               // the others: the monitor address that answered
  std::atomic<bool> stop_{false}, stopped_{false};
};

// The running watchdog; never destroyed while its detached thread may run.
Watchdog* g_watchdog = nullptr;

// Waits for a non-blocking start-up operation until the deadline; false when it ran out.
bool WaitUntil(MPI_Request* req, int64_t deadline_ns) {
  while (true) {
    int done = 0;
    if (PMPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (NowNs() > deadline_ns) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

absl::Status StartCollectiveWatchdog(MPI_Comm world, const WatchdogOptions& o) {
  if (!(o.timeout_s >= 0) || o.timeout_s > 1e9) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--collective_timeout=%g must be from 0 (off) to 1e9 seconds", o.timeout_s));
  }
  if (g_watchdog != nullptr) return absl::FailedPreconditionError("the watchdog already runs");
  int rank = 0, size = 1;
  PMPI_Comm_rank(world, &rank);
  PMPI_Comm_size(world, &size);
  if (o.timeout_s == 0 || size == 1) return absl::OkStatus();
  // The wrappers must be the program's MPI functions, or the watchdog would see no waits.
  const int64_t before = g_main.wrapped.load();
  MPI_Barrier(MPI_COMM_SELF);
  if (g_main.wrapped.load() == before) {
    return absl::InternalError(
        "the collective watchdog's MPI wrappers are not linked into this program (link "
        "colonnade_parallel before the MPI library), so it cannot see the collectives; run "
        "with --collective_timeout=0 to do without it");
  }

  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrFormat("the collective watchdog cannot make a UDP socket: %s (rank %d on host "
                        "%s); run with --collective_timeout=0 to do without it",
                        std::strerror(errno), rank, Hostname()));
  }
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(any);
  if (bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&any), &len) != 0) {
    const std::string err = std::strerror(errno);
    close(fd);
    return absl::InternalError(
        absl::StrFormat("the collective watchdog cannot bind a UDP port: %s (rank %d on host %s)",
                        err, rank, Hostname()));
  }

  // Every rank's host and pid to the monitor; the monitor's key, port and addresses to all.
  // Non-blocking, polled against the timeout: a rank that never comes ends the others here.
  RankCard mine;
  std::snprintf(mine.host, sizeof(mine.host), "%s", Hostname().c_str());
  mine.pid = static_cast<int32_t>(getpid());
  std::vector<RankCard> cards(rank == 0 ? size : 0);
  MonitorCard monitor;
  RankCard monitor_rank_card = mine;
  if (rank == 0) {
    std::random_device rd;
    monitor.job_key = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(NowNs());
    monitor.port = ntohs(any.sin_port);
    LocalAddresses(&monitor);
  }
  const int64_t deadline = NowNs() + static_cast<int64_t>(o.timeout_s * 1e9);
  auto ran_out = [&](const char* what) {
    Die(absl::StrFormat("%s: error on rank %d (host %s): the collective watchdog's start-up "
                        "exchange (%s) did not complete within --collective_timeout=%g s: a "
                        "rank did not reach it (it died, hangs, or cannot be reached); every "
                        "rank ends with exit code %d",
                        o.program, rank, Hostname(), what, o.timeout_s, o.exit_code),
        o.exit_code);
  };
  MPI_Request req;
  PMPI_Igather(&mine, sizeof(mine), MPI_BYTE, cards.data(), sizeof(RankCard), MPI_BYTE, 0, world,
               &req);
  if (!WaitUntil(&req, deadline)) ran_out("gather of the ranks' hosts");
  struct {
    MonitorCard monitor;
    RankCard card;
  } shared{monitor, mine};
  PMPI_Ibcast(&shared, sizeof(shared), MPI_BYTE, 0, world, &req);
  if (!WaitUntil(&req, deadline)) ran_out("broadcast of the monitor's address");
  monitor = shared.monitor;
  monitor_rank_card = shared.card;
  if (monitor.naddr == 0) {
    close(fd);
    return absl::InternalError(absl::StrFormat(
        "the collective watchdog's monitor (rank 0 on host %s) has no IPv4 address that is up",
        monitor_rank_card.host));
  }

  g_watchdog = new Watchdog(o, rank, size, fd, monitor, std::move(cards), monitor_rank_card);
  g_main.active.store(true, std::memory_order_release);
  std::thread([w = g_watchdog] { w->Run(); }).detach();
  return absl::OkStatus();
}

void StopCollectiveWatchdog() {
  g_main.active.store(false, std::memory_order_release);
  if (g_watchdog == nullptr) return;
  g_watchdog->Stop();
  for (int i = 0; i < 500 && !g_watchdog->stopped(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // The thread object is gone (detached) and the Watchdog is left to the process's end: a
  // thread that did not stop in time must not touch freed memory.
}

bool CollectiveWatchdogRunning() {
  return g_watchdog != nullptr && g_main.active.load(std::memory_order_acquire);
}

void WatchdogSetStep(int64_t step) { g_main.step.store(step, std::memory_order_relaxed); }
int64_t WatchdogCallsEntered() { return g_main.entered.load(std::memory_order_relaxed); }

WatchdogLabel::WatchdogLabel(const char* what)
    : previous_(g_main.label.exchange(what, std::memory_order_relaxed)) {}
WatchdogLabel::~WatchdogLabel() { g_main.label.store(previous_, std::memory_order_relaxed); }

WatchdogWait::WatchdogWait(const char* call)
    : armed_(g_main.active.load(std::memory_order_relaxed)) {
  if (armed_ && g_main.depth++ == 0) {
    g_main.call.store(call, std::memory_order_relaxed);
    g_main.entered.fetch_add(1, std::memory_order_relaxed);
    g_main.wait_start_ns.store(NowNs(), std::memory_order_release);
  }
}
WatchdogWait::~WatchdogWait() {
  if (armed_ && --g_main.depth == 0) g_main.wait_start_ns.store(0, std::memory_order_release);
}

}  // namespace colonnade

// ---- the MPI profiling wrappers ------------------------------------------------------------
// Each blocking MPI function of the program is defined here: it records the wait and calls
// the PMPI_ entry point, which every MPI library provides for exactly this purpose. The
// program's own definitions take precedence over the MPI library's for every caller.
using colonnade::Waiting;

extern "C" {

#define COLONNADE_WRAP(name, params, args) \
  int MPI_##name params {                  \
    Waiting w("MPI_" #name);               \
    return PMPI_##name args;               \
  }

COLONNADE_WRAP(Allreduce, (const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c),
               (s, r, n, t, op, c))
COLONNADE_WRAP(Reduce,
               (const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c),
               (s, r, n, t, op, root, c))
COLONNADE_WRAP(Bcast, (void* b, int n, MPI_Datatype t, int root, MPI_Comm c), (b, n, t, root, c))
COLONNADE_WRAP(Barrier, (MPI_Comm c), (c))
COLONNADE_WRAP(Gather,
               (const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, int root,
                MPI_Comm c),
               (s, sn, st, r, rn, rt, root, c))
COLONNADE_WRAP(Gatherv,
               (const void* s, int sn, MPI_Datatype st, void* r, const int rn[], const int d[],
                MPI_Datatype rt, int root, MPI_Comm c),
               (s, sn, st, r, rn, d, rt, root, c))
COLONNADE_WRAP(Allgather,
               (const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt,
                MPI_Comm c),
               (s, sn, st, r, rn, rt, c))
COLONNADE_WRAP(Allgatherv,
               (const void* s, int sn, MPI_Datatype st, void* r, const int rn[], const int d[],
                MPI_Datatype rt, MPI_Comm c),
               (s, sn, st, r, rn, d, rt, c))
COLONNADE_WRAP(Scatter,
               (const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, int root,
                MPI_Comm c),
               (s, sn, st, r, rn, rt, root, c))
COLONNADE_WRAP(Scatterv,
               (const void* s, const int sn[], const int d[], MPI_Datatype st, void* r, int rn,
                MPI_Datatype rt, int root, MPI_Comm c),
               (s, sn, d, st, r, rn, rt, root, c))
COLONNADE_WRAP(Alltoall,
               (const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt,
                MPI_Comm c),
               (s, sn, st, r, rn, rt, c))
COLONNADE_WRAP(Alltoallv,
               (const void* s, const int sn[], const int sd[], MPI_Datatype st, void* r,
                const int rn[], const int rd[], MPI_Datatype rt, MPI_Comm c),
               (s, sn, sd, st, r, rn, rd, rt, c))
COLONNADE_WRAP(Reduce_scatter,
               (const void* s, void* r, const int rn[], MPI_Datatype t, MPI_Op op, MPI_Comm c),
               (s, r, rn, t, op, c))
COLONNADE_WRAP(Reduce_scatter_block,
               (const void* s, void* r, int rn, MPI_Datatype t, MPI_Op op, MPI_Comm c),
               (s, r, rn, t, op, c))
COLONNADE_WRAP(Scan, (const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c),
               (s, r, n, t, op, c))
COLONNADE_WRAP(Exscan, (const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c),
               (s, r, n, t, op, c))
COLONNADE_WRAP(Wait, (MPI_Request * q, MPI_Status* st), (q, st))
COLONNADE_WRAP(Waitall, (int n, MPI_Request q[], MPI_Status* st), (n, q, st))
COLONNADE_WRAP(Waitany, (int n, MPI_Request q[], int* i, MPI_Status* st), (n, q, i, st))
COLONNADE_WRAP(Waitsome, (int n, MPI_Request q[], int* out, int idx[], MPI_Status st[]),
               (n, q, out, idx, st))
COLONNADE_WRAP(Send, (const void* b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c),
               (b, n, t, dest, tag, c))
COLONNADE_WRAP(Ssend, (const void* b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c),
               (b, n, t, dest, tag, c))
COLONNADE_WRAP(Recv, (void* b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status* st),
               (b, n, t, src, tag, c, st))
COLONNADE_WRAP(Sendrecv,
               (const void* s, int sn, MPI_Datatype st, int dest, int stag, void* r, int rn,
                MPI_Datatype rt, int src, int rtag, MPI_Comm c, MPI_Status* status),
               (s, sn, st, dest, stag, r, rn, rt, src, rtag, c, status))
COLONNADE_WRAP(Probe, (int src, int tag, MPI_Comm c, MPI_Status* st), (src, tag, c, st))
COLONNADE_WRAP(Comm_dup, (MPI_Comm c, MPI_Comm* out), (c, out))
COLONNADE_WRAP(Comm_split, (MPI_Comm c, int color, int key, MPI_Comm* out), (c, color, key, out))
COLONNADE_WRAP(Comm_split_type, (MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm* out),
               (c, type, key, info, out))
COLONNADE_WRAP(Comm_create, (MPI_Comm c, MPI_Group g, MPI_Comm* out), (c, g, out))
COLONNADE_WRAP(Finalize, (void), ())

#undef COLONNADE_WRAP

}  // extern "C"
