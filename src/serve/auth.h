// API-key authentication: "Authorization: Bearer <key>" → the tenant, its tier and
// whether the caller is an administrator.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/config.h"
#include "serve/rate_limiter.h"

namespace ferry::serve {

// Who made a request.
struct Principal {
  std::string tenant;               // "admin" for an admin key, "anonymous" in auth mode none
  std::string tier;
  int priority = 1;                 // the tier's priority, 1 the highest
  bool is_admin = false;
  int max_concurrent_requests = 0;  // the tenant's limit; 0: unlimited
  RateLimits rate_limits;           // the tenant's requests and tokens per minute
};

using Sha256Digest = std::array<uint8_t, 32>;

// SHA-256 (FIPS 180-4).
Sha256Digest Sha256(std::string_view data);

// Maps API keys to principals. Immutable after Create(); thread-safe.
//
// Keys are held only as SHA-256 digests. A presented key is hashed and compared with every
// stored digest in constant time, so neither the time taken nor the memory touched depends
// on which key matched or on the stored keys' lengths.
//
// Errors, and the HTTP status a server answers with (AuthHttpStatus):
//   kNotFound           → 401: header missing or not "Bearer <key>", or an unknown key;
//                              send "WWW-Authenticate: " kWwwAuthenticate with it
//   kFailedPrecondition → 403: a valid tenant key on an admin route
// In auth mode none every request, with or without a header, is the anonymous principal
// (tenant "anonymous", the highest tier, is_admin true).
class Authenticator {
 public:
  // Fails if the config is invalid (ServerConfig::Validate).
  static Result<Authenticator> Create(const ServerConfig& config);

  // `authorization` is the Authorization header's value, empty when the header is absent.
  Result<Principal> Authenticate(std::string_view authorization, bool admin_route) const;

  AuthMode mode() const { return mode_; }

 private:
  struct KeyEntry {
    Sha256Digest digest;
    uint32_t principal = 0;  // index into principals_
  };

  Authenticator() = default;

  AuthMode mode_ = AuthMode::kKeys;
  std::vector<Principal> principals_;
  std::vector<KeyEntry> keys_;
  Principal anonymous_;
};

inline constexpr std::string_view kWwwAuthenticate = "Bearer realm=\"ferry\"";

// 401 for kNotFound, 403 for kFailedPrecondition, 500 for anything else.
int AuthHttpStatus(const Status& status);

}  // namespace ferry::serve
