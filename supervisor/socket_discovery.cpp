#include "supervisor/socket_discovery.h"

namespace baton::supervisor {

socket_choice discover_socket(const socket_search& search, const socket_probe& probe) {
  if (!search.flag.empty()) return {search.flag, {}};
  if (search.env_socket && !search.env_socket->empty()) return {*search.env_socket, {}};
  socket_choice c;
  // Root's own daemon is the system one: one place, looked at once.
  if (search.own_socket.empty() || search.own_socket == search.system_socket) {
    c.path = search.system_socket;
    return c;
  }
  const auto& own = search.own_socket;
  if (!probe.exists(own)) {
    c.passed.push_back(own.string() + " (your own daemon's socket: not there)");
  } else if (!probe.accepts(own)) {
    c.passed.push_back(own.string() + " (your own daemon's socket: nothing answers on it)");
  } else {
    c.path = own;
    return c;
  }
  c.path = search.system_socket;
  return c;
}

std::string unreachable_message(const socket_choice& choice, const std::string& connect_error) {
  std::string out = connect_error;
  if (choice.passed.empty()) return out;
  out += "; also looked at";
  for (std::size_t i = 0; i < choice.passed.size(); ++i) {
    out += (i == 0 ? " " : ", ") + choice.passed[i];
  }
  return out + "; pass --socket PATH or set BATON_SOCKET to name the daemon";
}

}  // namespace baton::supervisor
