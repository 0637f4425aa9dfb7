// Identities. A node is named by its role and index ("master", "ps-1", "worker-7") and an
// incarnation number that grows each time the node is (re)started, so a message from a dead
// incarnation can be told from one of its replacement. Actors are addressed by (node, name).
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "troupe/core/error.hpp"

namespace troupe {

// A node name: 1-64 characters of [a-z0-9_-], starting with a letter.
bool valid_node_name(std::string_view name) noexcept;

struct node_id {
  std::string name;
  std::uint64_t incarnation = 0;

  // "worker-3#2"
  std::string to_string() const;
  // Parses "name#incarnation" (or a bare name, incarnation 0); errors name the bad text.
  static expected<node_id> parse(std::string_view text);

  auto operator<=>(const node_id&) const = default;
};

// An actor name within a node: "master", "dispenser", "ps/3", "worker/7".
// 1-64 characters of [a-z0-9_/-], starting with a letter.
bool valid_actor_name(std::string_view name) noexcept;

struct actor_address {
  node_id node;
  std::string name;

  // "worker/7@worker-7#2"
  std::string to_string() const;
  auto operator<=>(const actor_address&) const = default;
};

// A fresh random job id, 16 hex characters.
std::string make_job_id();

}  // namespace troupe
