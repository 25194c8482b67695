// An exclusive lock on a coordinator's --state_dir, held for the life of the process. Two
// coordinators on one state dir would each think they own its jobs: the second one's
// recovery re-queues the first one's running jobs ("coordinator restarted; the job is
// queued again") and so aborts them. The lock is taken before the job store is opened.
//
// It is a flock(2) on DIR/LOCK, which also holds the holder's pid (for the error message
// and for people; the pid is only a hint, the flock is the lock). The kernel drops a
// flock when its last file descriptor closes, so a coordinator that dies, even by SIGKILL,
// leaves no stale lock behind. flock locks belong to the open file description: a second
// Acquire in the same process conflicts with the first just as another process would.
//
//   absl::StatusOr<std::unique_ptr<StateDirLock>> lock = StateDirLock::Acquire(dir);
//   if (!lock.ok()) ...  // FAILED_PRECONDITION "state dir DIR is in use by ... (pid N)"
#ifndef MTRAIN_COORDINATOR_STATE_DIR_LOCK_H_
#define MTRAIN_COORDINATOR_STATE_DIR_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mtrain {

class StateDirLock {
 public:
  // Creates `dir` if missing (not its parents), then locks DIR/LOCK without waiting and
  // writes this process's pid into it. FAILED_PRECONDITION, with the message
  // "state dir DIR is in use by another coordinator (pid N)", when another open file
  // description holds the lock; another code when the directory or file cannot be made
  // or locked at all.
  static absl::StatusOr<std::unique_ptr<StateDirLock>> Acquire(const std::string& dir);

  // Releases the lock. The file stays: removing it would let a third process lock a new
  // file while a second one still holds (and believes in) the unlinked one.
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

  // DIR/LOCK.
  const std::string& path() const { return path_; }

 private:
  StateDirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_;
  std::string path_;
};

}  // namespace mtrain

#endif  // MTRAIN_COORDINATOR_STATE_DIR_LOCK_H_
