#pragma once

#include <string>
#include <string_view>

// The one rule by which troupe trusts a path on a machine several users share (docs/cluster.md,
// "Several users on one machine"). Whatever troupe reads back as its own (a cache entry read as the
// server's records, a model directory --watch swaps to) or writes into (a job or serve directory
// that exists already) must be the user's own: no link, owned by the user, and no other user may
// write in it. The directory holding a cache must not let another user replace its entries.
namespace troupe::cluster {

// Why `path` (not followed) is not this user's own: a link stands there, another user owns it, or
// other users may write in it (world-writable, or group-writable for a group other than the user's
// own: a user private group under umask 002 is the user alone). Empty: this user's own, or missing
// (callers that need it to exist check that themselves).
std::string not_own(const std::string& path);

// not_own for a directory troupe keeps its own things in (a cache's entry): also "not a directory"
// where something else stands there.
std::string not_own_directory(const std::string& path);

// Why the directory `dir` lets another user replace what troupe keeps in it: other users may write
// in it without the sticky bit (a sticky one, as /tmp, lets nobody rename another's entries), or
// another user owns it (its owner may rename any entry in it, sticky or not; root's excepted).
// Empty: fine, or missing.
std::string shared_parent_problem(const std::string& dir);

// Where this user keeps its `name` things under a shared `root` (the dataset cache, "datasets"; the
// servers' state, "serve"): <root>/<name>, or <root>/<name>-<uid> where <root>/<name> is not this
// user's own (another user made it first: each user then keeps theirs beside it).
std::string own_subdir(const std::string& root, const std::string& name);
// Whether the entry `file` of a root is one of own_subdir's places for `name`: `name` itself, or
// `name`-<digits>.
bool is_own_subdir_name(std::string_view file, std::string_view name);

}  // namespace troupe::cluster
