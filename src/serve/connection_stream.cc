#include "serve/connection_stream.h"

#include <openssl/ssl.h>

#include <fstream>

namespace ferry::serve {

namespace ssl = boost::asio::ssl;

Result<std::shared_ptr<ssl::context>> MakeTlsContext(const TlsOptions& options) {
  if (options.cert_path.empty() || options.key_path.empty()) {
    return InvalidArgument("listener.tls needs both cert and key");
  }
  for (const std::string* path : {&options.cert_path, &options.key_path}) {
    if (!std::ifstream(*path).good()) return NotFound("cannot read TLS file " + *path);
  }
  int min_version = 0;
  if (options.min_version == "1.2") {
    min_version = TLS1_2_VERSION;
  } else if (options.min_version == "1.3") {
    min_version = TLS1_3_VERSION;
  } else {
    return InvalidArgument("listener.tls.min_version must be 1.2 or 1.3, got '" + options.min_version + "'");
  }
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::single_dh_use);
  if (SSL_CTX_set_min_proto_version(context->native_handle(), min_version) != 1) {
    return Internal("cannot set the minimum TLS version");
  }
  boost::system::error_code ec;
  context->use_certificate_chain_file(options.cert_path, ec);
  if (ec) return InvalidArgument("TLS certificate " + options.cert_path + ": " + ec.message());
  context->use_private_key_file(options.key_path, ssl::context::pem, ec);
  if (ec) return InvalidArgument("TLS key " + options.key_path + ": " + ec.message());
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return InvalidArgument("TLS key " + options.key_path + " does not match the certificate " + options.cert_path);
  }
  return context;
}

}  // namespace ferry::serve
