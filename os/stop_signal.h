// A process-wide "please stop" flag raised by the OS's termination requests (SIGTERM and SIGINT
// on POSIX; Ctrl-C, Ctrl-Break and console close on Windows). The worker polls it at step
// boundaries, so a stop always lands between two steps and ends with a checkpoint.
#pragma once

namespace baton::os {

// Installs the handlers once; later calls do nothing.
void install_stop_handlers();

// True once a termination request arrived (or request_stop was called).
bool stop_requested();

// Raises the flag from ordinary code (the worker's stdin reader on a `stop` message).
void request_stop();

}  // namespace baton::os
