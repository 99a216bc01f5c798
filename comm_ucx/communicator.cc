#include "comm_ucx/communicator.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>

#include "comm_ucx/tunables.h"
#include "core/host_load.h"

namespace tpx::ucx {

namespace {

// Blocks while *word is 0, until woken or for at most `timeout` (null: no
// limit); returns at once if *word is no longer 0.
void FutexWaitWhileZero(std::atomic<uint32_t>* word, const timespec* timeout) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, 0, timeout, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

void OpState::Complete(Status status) {
  status_ = std::move(status);
  done_.store(1, std::memory_order_seq_cst);
  // A thread blocks only after counting itself in sleepers_ and then
  // looking at done_, both sequentially consistent: either it sees done_
  // or this sees it (and the kernel wakes it even if it has not blocked
  // yet, since it blocks only while done_ is 0). The usual waiter polls
  // and never blocks.
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  FutexWakeAll(&done_);
}

bool OpState::WaitUntil(Clock::time_point deadline, bool forever) {
  const auto start = Clock::now();
  const auto spin = std::chrono::microseconds(GetTunables().spin_us);
  // Yield-poll first: a futex wake-up costs more than most operations.
  for (uint32_t i = 0; !done(); ++i) {
    if ((i & 7) == 0 && Clock::now() - start >= spin) break;
    sched_yield();
  }
  if (done()) return true;
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  bool finished = true;
  while (done_.load(std::memory_order_seq_cst) == 0) {
    if (forever) {
      FutexWaitWhileZero(&done_, nullptr);
      continue;
    }
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      finished = false;
      break;
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec timeout{static_cast<time_t>(ns / 1000000000),
                           static_cast<long>(ns % 1000000000)};
    FutexWaitWhileZero(&done_, &timeout);
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  return finished || done();
}

Status Communicator::Create(const tpx_comm_config_v1_t& config,
                            std::unique_ptr<Communicator>* out) {
  if (config.store == nullptr) {
    return Status::Error(TPX_ERR_INVALID_ARGUMENT,
                         "ucx: the communicator config has no store for address exchange");
  }
  std::unique_ptr<Worker> worker;
  Status s = Worker::Create(config, &worker);
  if (!s.ok()) {
    return Status::Error(s.code(), "ucx: creating communicator '" + std::string(config.name) +
                                       "' (rank " + std::to_string(config.rank) + " of " +
                                       std::to_string(config.size) + "): " + s.message());
  }
  out->reset(new Communicator(config, std::move(worker)));
  return Status();
}

Communicator::Communicator(const tpx_comm_config_v1_t& config, std::unique_ptr<Worker> worker)
    : name_(config.name),
      timeout_ms_(config.timeout_ms > 0 ? config.timeout_ms : 300000),
      worker_(std::move(worker)) {
  executor_ = std::thread([this] { ExecutorLoop(); });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    stopping_.store(true);
  }
  cv_.notify_all();
  executor_.join();
  std::lock_guard<std::mutex> drive(drive_mu_);
  // Nothing may keep a caller's buffer or wait forever.
  const Status aborted =
      Status::Error(TPX_ERR_ABORTED, "ucx communicator '" + name_ + "' was destroyed");
  for (InFlight& f : in_flight_) {
    const bool still_running = f.io != nullptr;
    f.io.reset();
    f.state->Complete(still_running ? aborted : f.result);
  }
  in_flight_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Queued& q : queue_) q.state->Complete(aborted);
    queue_.clear();
  }
  const auto flush = std::chrono::milliseconds(std::min<int64_t>(timeout_ms_, 2000));
  worker_->CloseEndpoints(Clock::now() + flush, /*force=*/!failed_.ok());
}

void Communicator::Post(const tpx_coll_args_v1_t& args, std::shared_ptr<OpState> state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Queued{CollArgs::From(args, worker_->size()), std::move(state)});
    queued_.fetch_add(1, std::memory_order_release);
    if (!executor_sleeping_) return;
  }
  cv_.notify_one();
}

void Communicator::Reject(const tpx_coll_args_v1_t& args, std::string reason) {
  auto state = std::make_shared<OpState>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Queued{CollArgs::From(args, worker_->size()), state, std::move(reason)});
    queued_.fetch_add(1, std::memory_order_release);
    if (!executor_sleeping_) return;
  }
  cv_.notify_one();
}

bool Communicator::Wait(OpState& op, int64_t timeout_ms) {
  const bool forever = timeout_ms < 0;
  // Run the operations on this thread when nobody else is. An operation
  // cannot be interrupted, so only when the wait may last as long as the
  // communicator's own timeout.
  const bool may_drive = forever || timeout_ms >= timeout_ms_;
  // Such a long wait only bounds a hang, and its start is read from the
  // coarse clock, a fraction of the precise one's cost next to a small
  // operation (a tick later, so that it never ends early); a shorter wait
  // reads the precise clock.
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  const auto deadline = forever     ? Clock::time_point::max()
                        : may_drive ? CoarseNow() + CoarseTick() + timeout
                                    : Clock::now() + timeout;
  while (!op.done()) {
    if (may_drive) {
      std::unique_lock<std::mutex> drive(drive_mu_, std::try_to_lock);
      // The executor may hold the lock for a moment of idle progress: try
      // again for a few microseconds before waiting in slices.
      for (int i = 0; i < 256 && !drive.owns_lock() && !op.done(); ++i) {
        __builtin_ia32_pause();
        drive.try_lock();
      }
      if (drive.owns_lock()) {
        waiter_drives_.store(true, std::memory_order_relaxed);
        Drive(&op);
        waiter_drives_.store(false, std::memory_order_relaxed);
        // Operations posted after this one are left to the executor: end
        // its watch now, not at its next look.
        if (HasWork()) {
          std::lock_guard<std::mutex> lock(mu_);
          if (executor_watching_) {
            watch_ended_ = true;
            cv_.notify_one();
          }
        }
        continue;
      }
    }
    // Another thread drives; look again now and then in case it stops
    // before reaching this operation.
    const auto slice = Clock::now() + std::chrono::milliseconds(1);
    if (op.WaitUntil(may_drive ? std::min(slice, deadline) : deadline, false)) return true;
    if (Clock::now() >= deadline) return false;
  }
  return true;
}

void Communicator::ExecutorLoop() {
  // While the communicator is busy the executor ticks every `tick` and runs
  // work that has waited a whole tick without any thread driving it (a
  // waiting thread normally runs its own operations). After a quiet spell it
  // sleeps until the next post wakes it. No wake-up per operation. During
  // the quiet spell it progresses the worker on each tick (ProgressIdle);
  // after it, it still progresses the worker at a slowing pace (1 ms doubling
  // to 64 ms), so that a protocol message this rank owes a peer always
  // leaves, however long the rank's threads stay away from the communicator.
  // While a waiting thread runs the operations itself, the executor has
  // nothing to do: it looks at a doubling interval (up to kMaxWatchTicks
  // ticks) instead of every tick, each look costing the running operation
  // a context switch; the waiting thread ends the watch when it leaves
  // work behind.
  // The tick is busy_tick while the host has no idle CPU: each wake-up
  // then takes the core from a computing thread, typically this rank's own,
  // and so does running posted work that the thread will drive itself when
  // it waits. Measured with one compute thread per CPU, TP=2 on 2 cores:
  // ticks of 200 us, mostly the quiet spell's, cost the GPT example 8-10%
  // of its step; taking over the MLP's dgrad all-reduce during its weight
  // gradient GEMM (bench:tp_mlp) cost ~2% more at 5 ms than at 20 ms. Where
  // a CPU is idle the wake-ups are free and the short tick keeps latency
  // down.
  const auto short_tick = std::chrono::microseconds(GetTunables().tick_us);
  const auto busy_tick = std::chrono::microseconds(GetTunables().busy_tick_us);
  auto tick = short_tick;
  constexpr int kMaxWatchTicks = 8;
  auto watch = tick;
  const auto quiet = std::chrono::milliseconds(10);
  constexpr auto kFirstIdleWake = std::chrono::milliseconds(1);
  constexpr auto kLastIdleWake = std::chrono::milliseconds(64);
  auto idle_wake = kFirstIdleWake;
  auto last_work = Clock::now();
  bool work_seen = false;
  // The host's load, read at most once a millisecond and never under mu_
  // (a post would wait for the read).
  constexpr auto kLoadReadEvery = std::chrono::milliseconds(1);
  auto load_read_at = Clock::now() - kLoadReadEvery;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (busy_tick != short_tick && Clock::now() - load_read_at >= kLoadReadEvery) {
      lock.unlock();
      const bool idle_cpu = HostHasIdleCpu();
      lock.lock();
      load_read_at = Clock::now();
      tick = idle_cpu ? short_tick : busy_tick;
      if (stop_) break;
    }
    if (!HasWork()) {
      work_seen = false;
      const auto last_start =
          Clock::time_point(Clock::duration(last_start_.load(std::memory_order_relaxed)));
      if (Clock::now() - std::max(last_work, last_start) > quiet) {
        executor_sleeping_ = true;
        const bool woken = cv_.wait_for(lock, idle_wake, [&] { return stop_ || HasWork(); });
        executor_sleeping_ = false;
        if (woken) {
          last_work = Clock::now();  // a post woke it
          idle_wake = kFirstIdleWake;
          continue;
        }
        lock.unlock();
        const bool progressed = ProgressIdle();
        lock.lock();
        if (progressed) {
          last_work = Clock::now();
          idle_wake = kFirstIdleWake;
        } else {
          idle_wake = std::min(2 * idle_wake, std::chrono::milliseconds(kLastIdleWake));
        }
      } else {
        cv_.wait_for(lock, tick, [&] { return stop_; });
        lock.unlock();
        const bool progressed = ProgressIdle();
        lock.lock();
        if (progressed) last_work = Clock::now();
      }
      continue;
    }
    last_work = Clock::now();
    if (waiter_drives_.load(std::memory_order_relaxed)) {
      work_seen = false;
      executor_watching_ = true;
      cv_.wait_for(lock, watch, [&] { return stop_ || watch_ended_; });
      executor_watching_ = false;
      watch = watch_ended_ ? tick : std::min(2 * watch, kMaxWatchTicks * tick);
      watch_ended_ = false;
      continue;
    }
    watch = tick;
    if (!work_seen) {
      work_seen = true;
      cv_.wait_for(lock, tick, [&] { return stop_; });
      continue;
    }
    work_seen = false;
    lock.unlock();
    {
      std::unique_lock<std::mutex> drive(drive_mu_, std::try_to_lock);
      if (drive.owns_lock()) Drive(nullptr);
    }
    lock.lock();
  }
}

bool Communicator::HostHasIdleCpu() {
  HostLoadNow now;
  return !ReadHostLoadNow(&now) || now.runnable < now.cpus;
}

bool Communicator::ProgressIdle() {
  std::unique_lock<std::mutex> drive(drive_mu_, std::try_to_lock);
  if (!drive.owns_lock() || HasWork() || worker_->closed()) return false;
  bool any = false;
  for (int i = 0; i < 64 && worker_->Progress(); ++i) any = true;
  return any;
}

bool Communicator::PopQueued(Queued* out) {
  if (queued_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_release);
  return true;
}

void Communicator::Drive(const OpState* target) {
  Backoff backoff;
  while (target != nullptr ? !target->done() : HasWork()) {
    if (stopping_.load(std::memory_order_relaxed)) return;
    Queued op;
    if (PopQueued(&op)) {
      Execute(op);
      backoff.Reset();
      continue;
    }
    if (in_flight_.empty()) return;  // `target` is being run by another thread
    if (PollInFlight()) {
      backoff.Reset();
    } else {
      backoff.Idle(*worker_);
    }
  }
}

void Communicator::Finish(Queued& op, Status status) {
  // Operations complete in post order: straight away when nothing earlier
  // is still in flight, else behind it.
  if (in_flight_.empty()) {
    op.state->Complete(std::move(status));
    return;
  }
  in_flight_.push_back(InFlight{nullptr, op.state, std::move(status)});
  in_flight_count_.fetch_add(1, std::memory_order_release);
  PollInFlight();
}

void Communicator::Execute(Queued& op) {
  running_.fetch_add(1, std::memory_order_release);
  struct Done {
    std::atomic<size_t>& running;
    ~Done() { running.fetch_sub(1, std::memory_order_release); }
  } done{running_};
  const CollArgs& a = op.args;
  const bool collective = !IsPointToPoint(a.kind);
  if (failed_.ok()) {
    // A peer's notice about an earlier collective fails this rank too.
    worker_->SetCollective(coll_seq_, false);
    Status notice = worker_->CheckNotices();
    if (!notice.ok()) NoteFailure(notice);
  }
  const uint64_t seq = collective ? coll_seq_++ : p2p_seq_++;
  if (collective) {
    if (!op.rejected.empty()) worker_->notices().NoteRejected(seq);
    // A peer that already failed or rejected this collective fails it here
    // before any message is sent.
    Status early = worker_->notices().Take(seq, /*rejected_here=*/!op.rejected.empty());
    if (!early.ok() && failed_.ok()) {
      worker_->AnnounceFailure(early.code(), std::string(CollName(a.kind)) + ": " + early.message(),
                               &seq, a.seq);
      NoteFailure(early);
    }
  }
  if (!op.rejected.empty()) {
    // The host reports the rejection itself; peers hear of it here.
    if (failed_.ok()) worker_->AnnounceRejected(op.rejected, seq, a.seq);
    Finish(op, Status());
    return;
  }
  if (!failed_.ok()) {
    Finish(op, Status::Error(failed_.code(), "ucx " + std::string(CollName(a.kind)) +
                                                 ": communicator '" + name_ +
                                                 "' failed earlier: " + failed_.message()));
    return;
  }
  const auto start = CoarseNow();
  last_start_.store(start.time_since_epoch().count(), std::memory_order_relaxed);
  const auto deadline = start + std::chrono::milliseconds(timeout_ms_);
  Status s;
  if (collective) {
    // A collective finishes here: its OpIo lives on the stack.
    worker_->SetCollective(coll_seq_, true);
    {
      OpIo io(*worker_, scratch_, CollName(a.kind), seq, a.seq, /*collective=*/true, deadline);
      s = RunCollective(io, a);
    }
    worker_->SetCollective(coll_seq_, false);
  } else {
    auto io = std::make_unique<OpIo>(*worker_, scratch_, CollName(a.kind), seq, a.seq,
                                     /*collective=*/false, deadline);
    s = RunCollective(*io, a);
    if (s.ok()) {
      in_flight_.push_back(InFlight{std::move(io), op.state, Status()});
      in_flight_count_.fetch_add(1, std::memory_order_release);
      PollInFlight();
      return;
    }
  }
  if (!s.ok()) NoteFailure(s);
  Finish(op, std::move(s));
}

bool Communicator::PollInFlight() {
  bool any = false;
  for (InFlight& f : in_flight_) {
    if (f.io == nullptr) continue;
    bool done = false;
    Status s = f.io->Test(&done);
    if (!s.ok()) NoteFailure(s);
    if (done || !s.ok()) {
      f.io.reset();
      f.result = std::move(s);
      any = true;
    }
  }
  while (!in_flight_.empty() && in_flight_.front().io == nullptr) {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    in_flight_count_.fetch_sub(1, std::memory_order_release);
    f.state->Complete(std::move(f.result));
    any = true;
  }
  return any;
}

void Communicator::NoteFailure(const Status& status) {
  if (failed_.ok()) failed_ = status;
}

}  // namespace tpx::ucx
