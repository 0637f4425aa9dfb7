// What a `troupe serve` server is doing, read from outside it: one rule for `troupe serve status`,
// the dashboard's server list and `troupe jobs prune`, so that they never disagree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::observe {

// This machine's running kernel (/proc/sys/kernel/random/boot_id, a new one each boot; "" where it
// cannot be read). Processes under one kernel see each other's locks, whatever their namespaces: a
// server writes it into server.json, and a looker under the same kernel judges the server by its
// lock alone.
const std::string& kernel_id();

// The server's state as people are told it: serving, draining or starting while it holds its
// server.lock (stopped or failed once it wrote its end: it exits now); stopped or failed as it wrote
// at its end; dead where it wrote that it runs and no longer holds its lock (SIGKILL, the OOM
// killer, a crash). A server under another kernel (another machine of a shared root: its lock unseen
// here, `written_kernel` not kernel_id()) runs while its file is rewritten, 15 s at most apart. ""
// where `written` is no state word (no server.json, or one unreadable): the caller says why.
std::string server_state(bool lock_held, std::string_view written, std::string_view written_kernel,
                         double age_s);

// The same from a server's server.json text (its "state", "kernel" and "updated_ms", the file's age
// read against `now_ms`, wall clock): "" where the text is no JSON object or names no state word.
std::string server_state_of_json(bool lock_held, std::string_view server_json, std::int64_t now_ms);

}  // namespace troupe::observe
