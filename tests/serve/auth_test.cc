#include "serve/auth.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace ferry::serve {
namespace {

std::string Hex(const Sha256Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

TEST(Sha256Test, StandardVectors) {
  // FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf").
  EXPECT_EQ(Hex(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(Sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopq"
                       "rsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Hex(Sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PaddingBoundaries) {
  // Lengths around the one-or-two padding block boundary (55/56 bytes) and block edges.
  // References from Python's hashlib over bytes (7 * i + 3) mod 256.
  const std::vector<std::pair<size_t, std::string>> cases = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
  };
  for (const auto& [size, expected] : cases) {
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>((i * 7 + 3) % 256);
    EXPECT_EQ(Hex(Sha256(data)), expected) << size << " bytes";
  }
}

ServerConfig KeysConfig() {
  ServerConfig config;
  config.listener.host = "0.0.0.0";
  config.tiers = {{"gold", 1}, {"standard", 2}};
  config.tenants.push_back(TenantConfig{"acme", "gold", {"acme-key-1", "acme-key-2-is-much-longer"}, 0});
  config.tenants.push_back(TenantConfig{"globex", "standard", {"globex-key"}, 8});
  config.auth.admin_keys = {"admin-key"};
  return config;
}

Authenticator MakeAuthenticator(const ServerConfig& config) {
  Result<Authenticator> auth = Authenticator::Create(config);
  EXPECT_TRUE(auth.ok()) << auth.status().ToString();
  return std::move(auth).value();
}

TEST(AuthTest, ValidKeysMapToTenantAndTier) {
  const Authenticator auth = MakeAuthenticator(KeysConfig());
  EXPECT_EQ(auth.mode(), AuthMode::kKeys);

  Result<Principal> acme = auth.Authenticate("Bearer acme-key-2-is-much-longer", false);
  ASSERT_TRUE(acme.ok()) << acme.status().ToString();
  EXPECT_EQ(acme->tenant, "acme");
  EXPECT_EQ(acme->tier, "gold");
  EXPECT_EQ(acme->priority, 1);
  EXPECT_FALSE(acme->is_admin);

  Result<Principal> globex = auth.Authenticate("Bearer globex-key", false);
  ASSERT_TRUE(globex.ok()) << globex.status().ToString();
  EXPECT_EQ(globex->tenant, "globex");
  EXPECT_EQ(globex->tier, "standard");
  EXPECT_EQ(globex->priority, 2);
  EXPECT_EQ(globex->max_concurrent_requests, 8);
  EXPECT_FALSE(globex->is_admin);
}

TEST(AuthTest, SchemeIsCaseInsensitiveAndSpacesAreTolerated) {
  const Authenticator auth = MakeAuthenticator(KeysConfig());
  for (const char* header : {"bearer acme-key-1", "BEARER acme-key-1", "BeArEr   acme-key-1", " Bearer\tacme-key-1 "}) {
    Result<Principal> p = auth.Authenticate(header, false);
    ASSERT_TRUE(p.ok()) << header << ": " << p.status().ToString();
    EXPECT_EQ(p->tenant, "acme");
  }
}

TEST(AuthTest, BadCredentialsAre401) {
  const Authenticator auth = MakeAuthenticator(KeysConfig());
  const std::vector<std::string> headers = {
      "",                            // header absent
      "Bearer wrong-key",            // unknown
      "Bearer acme-key-",            // a prefix of a key
      "Bearer acme-key-1x",          // a key plus one character
      "Bearer ACME-KEY-1",           // keys are case-sensitive
      "Basic YWNtZTphY21lLWtleS0x",  // another scheme
      "acme-key-1",                  // no scheme
      "Bearer",                      // no key
      "Bearer ",                     // no key
      "Bearer acme-key-1 extra",     // two tokens
      "Bearerx acme-key-1",          // not the scheme
  };
  for (const std::string& header : headers) {
    Result<Principal> p = auth.Authenticate(header, false);
    ASSERT_FALSE(p.ok()) << "'" << header << "'";
    EXPECT_EQ(p.status().code(), StatusCode::kNotFound) << "'" << header << "'";
    EXPECT_EQ(AuthHttpStatus(p.status()), 401);
    // A message never echoes what was presented.
    EXPECT_EQ(p.status().message().find("acme-key"), std::string::npos) << p.status().message();
  }
  EXPECT_NE(auth.Authenticate("", false).status().message().find("missing"), std::string::npos);
  EXPECT_NE(auth.Authenticate("Basic abc", false).status().message().find("malformed"), std::string::npos);
  EXPECT_NE(auth.Authenticate("Bearer nope", false).status().message().find("invalid API key"), std::string::npos);
}

TEST(AuthTest, AdminRoutesNeedAnAdminKey) {
  const Authenticator auth = MakeAuthenticator(KeysConfig());
  Result<Principal> tenant = auth.Authenticate("Bearer acme-key-1", /*admin_route=*/true);
  ASSERT_FALSE(tenant.ok());
  EXPECT_EQ(tenant.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(AuthHttpStatus(tenant.status()), 403);

  // An unknown key on an admin route is still 401, not 403.
  EXPECT_EQ(auth.Authenticate("Bearer nope", true).status().code(), StatusCode::kNotFound);

  for (bool admin_route : {true, false}) {
    Result<Principal> admin = auth.Authenticate("Bearer admin-key", admin_route);
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    EXPECT_TRUE(admin->is_admin);
    EXPECT_EQ(admin->tenant, "admin");
    EXPECT_EQ(admin->tier, "gold");
    EXPECT_EQ(admin->priority, 1);
  }
}

TEST(AuthTest, ModeNoneMakesEveryRequestAnonymous) {
  ServerConfig config;
  config.auth.mode = AuthMode::kNone;
  config.tiers = {{"batch", 3}, {"interactive", 2}};
  const Authenticator auth = MakeAuthenticator(config);
  for (const char* header : {"", "Bearer anything", "Basic abc"}) {
    for (bool admin_route : {false, true}) {
      Result<Principal> p = auth.Authenticate(header, admin_route);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(p->tenant, "anonymous");
      EXPECT_EQ(p->tier, "interactive");
      EXPECT_EQ(p->priority, 2);
      EXPECT_TRUE(p->is_admin);
    }
  }
}

TEST(AuthTest, CreateRejectsAnInvalidConfig) {
  ServerConfig config = KeysConfig();
  config.tenants[1].keys = {"acme-key-1"};
  Result<Authenticator> auth = Authenticator::Create(config);
  ASSERT_FALSE(auth.ok());
  EXPECT_NE(auth.status().message().find("duplicate key"), std::string::npos) << auth.status().ToString();

  ServerConfig none_public;
  none_public.auth.mode = AuthMode::kNone;
  none_public.listener.host = "0.0.0.0";
  EXPECT_FALSE(Authenticator::Create(none_public).ok());
}

TEST(AuthTest, ConcurrentAuthenticationAgrees) {
  const Authenticator auth = MakeAuthenticator(KeysConfig());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&auth, &mismatches, t] {
      for (int i = 0; i < 500; ++i) {
        const bool good = (i + t) % 2 == 0;
        Result<Principal> p = auth.Authenticate(good ? "Bearer globex-key" : "Bearer globex-kez", false);
        if (p.ok() != good || (good && p->tenant != "globex")) mismatches.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace ferry::serve
