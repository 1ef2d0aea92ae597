// A blocking HTTP client for server tests: whole requests, raw bytes (for malformed and
// partial requests) and SSE streams read event by event. Every read has a deadline.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ferry::serve::testing {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;
  bool ok = false;  // a complete reply was read

  nlohmann::json Json() const {
    try {
      return nlohmann::json::parse(body);
    } catch (...) {
      return nlohmann::json();
    }
  }
};

// One TCP connection. Not thread-safe (one per test thread).
class TestConnection {
 public:
  explicit TestConnection(int port, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~TestConnection();
  bool connected() const { return connected_; }

  void SendRaw(const std::string& bytes);
  // Half-closes: no more bytes will be sent, replies can still be read.
  void ShutdownSend();
  // Reads one full response (Content-Length or chunked). `ok` false on timeout / EOF.
  HttpReply ReadReply();
  // Reads the status line and headers of a streamed (chunked) response.
  HttpReply ReadHead();
  // Next SSE `data:` payload of a chunked response; false at the end of the body.
  bool NextEvent(std::string& data);
  // True when the server closed the connection (a read returns EOF before the deadline).
  bool WaitClosed(std::chrono::milliseconds within);
  void Close();

  HttpReply Request(const std::string& method, const std::string& path, const std::string& body = "",
                    const std::map<std::string, std::string>& headers = {});

 private:
  bool ReadLine(std::string& line);
  bool ReadExact(size_t n, std::string& out);
  bool Fill();

  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::socket socket_{ioc_};
  std::chrono::milliseconds timeout_;
  std::string buf_;
  std::string pending_body_;  // decoded chunk bytes not yet split into events
  bool connected_ = false;
  bool chunked_body_done_ = false;
};

// One request on a fresh connection.
HttpReply Http(int port, const std::string& method, const std::string& path, const std::string& body = "",
               const std::map<std::string, std::string>& headers = {});
HttpReply PostJson(int port, const std::string& path, const nlohmann::json& body,
                   const std::map<std::string, std::string>& headers = {});

}  // namespace ferry::serve::testing
