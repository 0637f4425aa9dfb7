#include "troupe/cluster/addresses.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "troupe/cluster/errc.hpp"

namespace troupe::cluster {

namespace {

std::string host_ipv4() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &res) != 0) return {};
  std::string first, best;
  for (auto* a = res; a; a = a->ai_next) {
    char buf[INET_ADDRSTRLEN] = {};
    auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
    if (!::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf)) continue;
    if (first.empty()) first = buf;
    if (best.empty() && std::strncmp(buf, "127.", 4) != 0) best = buf;
  }
  ::freeaddrinfo(res);
  return best.empty() ? first : best;
}

}  // namespace

expected<std::string> ipv4_of(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res); rc != 0)
    return make_unexpected(cluster_errc::invalid_spec,
                           "'" + name + "' does not resolve: " + ::gai_strerror(rc));
  char buf[INET_ADDRSTRLEN] = {};
  auto* in = reinterpret_cast<sockaddr_in*>(res->ai_addr);
  bool ok = ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) != nullptr;
  ::freeaddrinfo(res);
  if (!ok) return make_unexpected(cluster_errc::invalid_spec, "'" + name + "': no IPv4 address");
  return std::string(buf);
}

expected<std::string> resolve_listen(const std::string& listen) {
  if (listen.rfind("@host:", 0) != 0) return listen;
  auto ip = host_ipv4();
  if (ip.empty())
    return make_unexpected(cluster_errc::invalid_spec,
                           "--listen " + listen + ": this host's name does not resolve");
  return ip + listen.substr(5);
}

expected<void> check_advertise(const std::string& advertise) {
  const std::string key = "cluster.advertise '" + advertise + "': ";
  auto ip = ipv4_of(advertise);
  if (!ip) return make_unexpected(cluster_errc::invalid_spec, key + ip.err().context());
  sockaddr_in at{};
  at.sin_family = AF_INET;
  if (::inet_pton(AF_INET, ip->c_str(), &at.sin_addr) != 1)
    return make_unexpected(cluster_errc::invalid_spec, key + "expected an IPv4 address of this machine");
  const std::string as = *ip == advertise ? std::string() : " (" + *ip + ")";
  const std::uint32_t a = ntohl(at.sin_addr.s_addr);
  if ((a >> 24) == 127)
    return make_unexpected(
        cluster_errc::invalid_spec,
        key + "a loopback address" + as +
            ", which the hosts of cluster.hosts cannot reach: give this machine's address on "
            "their network");
  // 0.0.0.0 binds (every address) but names none: the nodes would dial themselves.
  if ((a >> 24) == 0 || (a >> 28) == 0xE || a == 0xFFFFFFFFu)
    return make_unexpected(cluster_errc::invalid_spec,
                           key + "not one address of this machine" + as +
                               " (any, multicast or broadcast): give the one the hosts reach");
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_unexpected(core_errc::io_error, std::string("socket: ") + std::strerror(errno));
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0;  // port 0: any
  const int err = errno;
  ::close(fd);
  if (!bound)
    return make_unexpected(
        cluster_errc::invalid_spec,
        key + "not an address of this machine (" + std::strerror(err) + "): the master listens there");
  return {};
}

expected<std::string> local_address_towards(const std::string& ip) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  if (::inet_pton(AF_INET, ip.c_str(), &to.sin_addr) != 1)
    return make_unexpected(cluster_errc::invalid_spec, "'" + ip + "' is not an IPv4 address");
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_unexpected(core_errc::io_error, std::string("socket: ") + std::strerror(errno));
  sockaddr_in me{};
  socklen_t len = sizeof me;
  // A datagram socket's connect() only picks the route: nothing is sent.
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  int err = errno;
  ::close(fd);
  if (!ok) return make_unexpected(core_errc::io_error, "no route to " + ip + ": " + std::strerror(err));
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf);
  return std::string(buf);
}

}  // namespace troupe::cluster
