#include "test_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cctype>

namespace ferry::serve::testing {

namespace net = boost::asio;
using tcp = net::ip::tcp;

TestConnection::TestConnection(int port, std::chrono::milliseconds timeout) : timeout_(timeout) {
  boost::system::error_code ec;
  socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)), ec);
  connected_ = !ec;
  if (!connected_) return;
  timeval tv;
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

TestConnection::~TestConnection() { Close(); }

void TestConnection::Close() {
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

void TestConnection::ShutdownSend() {
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
}

void TestConnection::SendRaw(const std::string& bytes) {
  boost::system::error_code ec;
  net::write(socket_, net::buffer(bytes), ec);
}

bool TestConnection::Fill() {
  char tmp[8192];
  boost::system::error_code ec;
  const size_t n = socket_.read_some(net::buffer(tmp), ec);
  if (ec || n == 0) return false;
  buf_.append(tmp, n);
  return true;
}

bool TestConnection::ReadLine(std::string& line) {
  for (;;) {
    const size_t at = buf_.find("\r\n");
    if (at != std::string::npos) {
      line = buf_.substr(0, at);
      buf_.erase(0, at + 2);
      return true;
    }
    if (!Fill()) return false;
  }
}

bool TestConnection::ReadExact(size_t n, std::string& out) {
  while (buf_.size() < n) {
    if (!Fill()) return false;
  }
  out = buf_.substr(0, n);
  buf_.erase(0, n);
  return true;
}

HttpReply TestConnection::ReadHead() {
  HttpReply r;
  std::string line;
  if (!ReadLine(line) || line.size() < 12) return r;
  r.status = std::atoi(line.substr(9, 3).c_str());
  while (ReadLine(line) && !line.empty()) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers[name] = value;
  }
  r.ok = true;
  chunked_body_done_ = false;
  pending_body_.clear();
  return r;
}

HttpReply TestConnection::ReadReply() {
  HttpReply r = ReadHead();
  if (!r.ok) return r;
  r.ok = false;
  if (r.headers["transfer-encoding"] == "chunked") {
    for (;;) {
      std::string size_line;
      if (!ReadLine(size_line)) return r;
      const size_t n = std::stoul(size_line, nullptr, 16);
      std::string data, crlf;
      if (!ReadExact(n, data) || !ReadExact(2, crlf)) return r;
      if (n == 0) break;
      r.body += data;
    }
  } else {
    const size_t n = std::stoul(r.headers.count("content-length") ? r.headers["content-length"] : "0");
    if (!ReadExact(n, r.body)) return r;
  }
  r.ok = true;
  return r;
}

bool TestConnection::NextEvent(std::string& data) {
  for (;;) {
    const size_t end = pending_body_.find("\n\n");
    if (end != std::string::npos) {
      std::string event = pending_body_.substr(0, end);
      pending_body_.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) {
        data = event.substr(6);
        return true;
      }
      continue;
    }
    if (chunked_body_done_) return false;
    std::string size_line;
    if (!ReadLine(size_line)) return false;
    const size_t n = std::stoul(size_line, nullptr, 16);
    std::string chunk, crlf;
    if (!ReadExact(n, chunk) || !ReadExact(2, crlf)) return false;
    if (n == 0) {
      chunked_body_done_ = true;
      continue;
    }
    pending_body_ += chunk;
  }
}

bool TestConnection::WaitClosed(std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    char tmp[4096];
    boost::system::error_code ec;
    socket_.read_some(net::buffer(tmp), ec);
    if (ec == net::error::eof || ec == net::error::connection_reset) return true;
    if (ec && ec != net::error::would_block && ec != net::error::try_again) return ec != net::error::timed_out;
  }
  return false;
}

HttpReply TestConnection::Request(const std::string& method, const std::string& path, const std::string& body,
                                  const std::map<std::string, std::string>& headers) {
  std::string req = method + " " + path + " HTTP/1.1\r\n";
  if (headers.count("Host") == 0) req += "Host: 127.0.0.1\r\n";  // a test may send its own
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST") {
    // A test may send its own Content-Type (multipart uploads).
    if (headers.count("Content-Type") == 0) req += "Content-Type: application/json\r\n";
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  SendRaw(req);
  return ReadReply();
}

HttpReply Http(int port, const std::string& method, const std::string& path, const std::string& body,
               const std::map<std::string, std::string>& headers) {
  TestConnection c(port);
  if (!c.connected()) return HttpReply{};
  return c.Request(method, path, body, headers);
}

HttpReply PostJson(int port, const std::string& path, const nlohmann::json& body,
                   const std::map<std::string, std::string>& headers) {
  return Http(port, "POST", path, body.dump(), headers);
}

}  // namespace ferry::serve::testing
