// Orderly shutdown on SIGINT/SIGTERM for daemons.
//
// Construct first thing in main(), before any thread starts: the constructor blocks the
// signals in the calling thread, and threads created afterwards inherit the mask, so the
// signals stay pending until WaitForSignal() picks them up. No async-signal-safety puzzles.
//
//   int main() {
//     ShutdownSignal shutdown;
//     ... start server ...
//     std::thread([&] { shutdown.WaitForSignal(); server->Shutdown(); }).detach();
#ifndef MTRAIN_COMMON_SHUTDOWN_SIGNAL_H_
#define MTRAIN_COMMON_SHUTDOWN_SIGNAL_H_

#include <signal.h>

namespace mtrain {

class ShutdownSignal {
 public:
  ShutdownSignal() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }

  // Blocks until SIGINT or SIGTERM arrives; returns its number.
  int WaitForSignal() {
    int signal_number = 0;
    while (sigwait(&signals_, &signal_number) != 0) {
    }
    return signal_number;
  }

 private:
  sigset_t signals_;
};

}  // namespace mtrain

#endif  // MTRAIN_COMMON_SHUTDOWN_SIGNAL_H_
