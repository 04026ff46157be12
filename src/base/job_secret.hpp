// The job's secret (the bootstrap cookie) and what is derived from it.
//
// The cookie is random per job: the unique ID carries it (nvst's spawner,
// Python through torch.distributed), NVST_COOKIE gives it, or, for a
// torchrun/mpirun job on one host, rank 0 draws it and hands it to the
// other ranks through a file only this user can read (publish_cookie /
// read_cookie). Everything else the job needs to keep strangers out (fabric
// memory keys, message tags, names of sockets) is derived from it with a
// keyed pseudo-random function, so a name or a key seen by a stranger says
// nothing about the secret.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/socket.hpp"

namespace nvst::secret {

using Cookie = std::array<std::uint8_t, 16>;

// Lowercase hex digits of n bytes.
std::string to_hex(const std::uint8_t* p, std::size_t n);

// SipHash-2-4 of `label` keyed by the cookie.
std::uint64_t derive(const Cookie& key, std::string_view label);
// 16 lowercase hex digits of derive(key, label): a name that reveals nothing.
std::string derived_name(const Cookie& key, std::string_view label);

// /tmp/nvst-<uid>, created with mode 0700; refused unless it is a directory
// owned by this user that nobody else may enter.
std::string private_dir();

// Rank 0: a fresh random cookie, written to `path` (mode 0600, atomically).
Cookie publish_cookie(const std::string& path);
// Other ranks: waits for `path` to hold a cookie; throws at the deadline.
Cookie read_cookie(const std::string& path, net::Deadline deadline);

}  // namespace nvst::secret
