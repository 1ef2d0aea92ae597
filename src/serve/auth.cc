#include "serve/auth.h"

#include <cstring>
#include <utility>

namespace ferry::serve {

namespace {

// ---- SHA-256, FIPS 180-4 ---------------------------------------------------------------

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr uint32_t kInitialHash[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

constexpr uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// One 64-byte block into the running hash (FIPS 180-4 §6.2.2).
void Compress(uint32_t hash[8], const uint8_t* block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) {
    w[t] = (uint32_t{block[4 * t]} << 24) | (uint32_t{block[4 * t + 1]} << 16) | (uint32_t{block[4 * t + 2]} << 8) |
           uint32_t{block[4 * t + 3]};
  }
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = hash[0], b = hash[1], c = hash[2], d = hash[3];
  uint32_t e = hash[4], f = hash[5], g = hash[6], h = hash[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t big_s1 = Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25);
    const uint32_t ch = (e & f) ^ (~e & g);
    const uint32_t t1 = h + big_s1 + ch + kRoundConstants[t] + w[t];
    const uint32_t big_s0 = Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22);
    const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = big_s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  hash[0] += a;
  hash[1] += b;
  hash[2] += c;
  hash[3] += d;
  hash[4] += e;
  hash[5] += f;
  hash[6] += g;
  hash[7] += h;
}

// 1 when the digests are equal, else 0. Every byte is read and no branch depends on them.
uint32_t DigestsEqual(const Sha256Digest& a, const Sha256Digest& b) {
  uint32_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint32_t>(a[i] ^ b[i]);
  // diff is in [0, 255]: diff - 1 wraps to all ones only when diff is 0.
  return ((diff - 1u) >> 8) & 1u;
}

bool EqualsIgnoringCase(std::string_view text, std::string_view lower) {
  if (text.size() != lower.size()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != lower[i]) return false;
  }
  return true;
}

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

// The <key> of "Bearer <key>" (RFC 6750 §2.1; the scheme is case-insensitive, RFC 7235
// §2.1), or empty when the value has another form.
std::string_view BearerToken(std::string_view value) {
  while (!value.empty() && IsSpace(value.front())) value.remove_prefix(1);
  while (!value.empty() && IsSpace(value.back())) value.remove_suffix(1);
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() || !EqualsIgnoringCase(value.substr(0, kScheme.size()), kScheme) ||
      !IsSpace(value[kScheme.size()])) {
    return {};
  }
  value.remove_prefix(kScheme.size());
  while (!value.empty() && IsSpace(value.front())) value.remove_prefix(1);
  for (char c : value) {
    if (IsSpace(c)) return {};  // "Bearer a b" is not one key
  }
  return value;
}

}  // namespace

Sha256Digest Sha256(std::string_view data) {
  uint32_t hash[8];
  std::memcpy(hash, kInitialHash, sizeof(hash));
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
  const size_t full_blocks = data.size() / 64;
  for (size_t i = 0; i < full_blocks; ++i) Compress(hash, bytes + 64 * i);

  // Padding (§5.1.1): 0x80, zeros, then the message length in bits as a big-endian
  // 64-bit integer; one block if the tail leaves room for the 9 bytes, else two.
  uint8_t tail[128] = {};
  const size_t rest = data.size() % 64;
  if (rest != 0) std::memcpy(tail, bytes + 64 * full_blocks, rest);
  tail[rest] = 0x80;
  const size_t tail_size = rest < 56 ? 64 : 128;
  const uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_size - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  Compress(hash, tail);
  if (tail_size == 128) Compress(hash, tail + 64);

  Sha256Digest digest;
  for (int i = 0; i < 8; ++i) {
    digest[4 * i] = static_cast<uint8_t>(hash[i] >> 24);
    digest[4 * i + 1] = static_cast<uint8_t>(hash[i] >> 16);
    digest[4 * i + 2] = static_cast<uint8_t>(hash[i] >> 8);
    digest[4 * i + 3] = static_cast<uint8_t>(hash[i]);
  }
  return digest;
}

Result<Authenticator> Authenticator::Create(const ServerConfig& config) {
  FERRY_RETURN_IF_ERROR(config.Validate());
  Authenticator auth;
  auth.mode_ = config.auth.mode;
  const std::string& top_tier = config.HighestTier();
  const int top_priority = config.tiers.at(top_tier);
  auth.anonymous_ = Principal{"anonymous", top_tier, top_priority, /*is_admin=*/true, 0, RateLimits{}};

  auto add_keys = [&auth](const std::vector<std::string>& keys, Principal principal) {
    const auto index = static_cast<uint32_t>(auth.principals_.size());
    auth.principals_.push_back(std::move(principal));
    for (const std::string& key : keys) auth.keys_.push_back(KeyEntry{Sha256(key), index});
  };
  for (const TenantConfig& tenant : config.tenants) {
    add_keys(tenant.keys, Principal{tenant.name, tenant.tier, config.tiers.at(tenant.tier), /*is_admin=*/false,
                                    tenant.max_concurrent_requests,
                                    RateLimits{tenant.requests_per_minute, tenant.tokens_per_minute}});
  }
  add_keys(config.auth.admin_keys, Principal{"admin", top_tier, top_priority, /*is_admin=*/true, 0, RateLimits{}});

  // Validate() rejects equal keys; equal digests would be a SHA-256 collision. Either would
  // make the branch-free selection below OR two principal indices together.
  for (size_t i = 0; i < auth.keys_.size(); ++i) {
    for (size_t j = i + 1; j < auth.keys_.size(); ++j) {
      if (auth.keys_[i].digest == auth.keys_[j].digest) return Internal("two API keys have the same digest");
    }
  }
  return auth;
}

Result<Principal> Authenticator::Authenticate(std::string_view authorization, bool admin_route) const {
  if (mode_ == AuthMode::kNone) return anonymous_;
  if (authorization.empty()) return NotFound("missing Authorization header; send 'Authorization: Bearer <key>'");
  const std::string_view key = BearerToken(authorization);
  if (key.empty()) return NotFound("malformed Authorization header; expected 'Bearer <key>'");

  // Every stored digest is compared and the match is picked with masks, so the work done
  // is the same whichever key (if any) matches.
  const Sha256Digest presented = Sha256(key);
  uint32_t found = 0;
  uint32_t index = 0;
  for (const KeyEntry& entry : keys_) {
    const uint32_t equal = DigestsEqual(presented, entry.digest);
    const uint32_t mask = 0u - equal;
    index |= mask & entry.principal;
    found |= equal;
  }
  if (found == 0) return NotFound("invalid API key");
  const Principal& principal = principals_[index];
  if (admin_route && !principal.is_admin) return FailedPrecondition("this route needs an admin key");
  return principal;
}

int AuthHttpStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kNotFound: return 401;
    case StatusCode::kFailedPrecondition: return 403;
    default: return 500;
  }
}

}  // namespace ferry::serve
