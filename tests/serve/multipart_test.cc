#include "serve/multipart.h"

#include <gtest/gtest.h>

namespace ferry::serve {
namespace {

TEST(MultipartTest, FindsTheBoundary) {
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; boundary=abc"), "abc");
  EXPECT_EQ(*MultipartBoundary("Multipart/Form-Data;boundary=\"a b;c\""), "a b;c");
  EXPECT_FALSE(MultipartBoundary("application/json").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=" + std::string(71, 'x')).ok());
}

TEST(MultipartTest, SplitsParts) {
  const std::string body =
      "preamble\r\n--XyZ\r\n"
      "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
      "batch\r\n--XyZ\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"in \\\"1\\\".jsonl\"\r\n"
      "Content-Type: application/jsonl\r\n\r\n"
      "line1\r\nline2 --XyZ not a boundary\n\r\n--XyZ--\r\nepilogue";
  auto parts = ParseMultipart(body, "XyZ");
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "purpose");
  EXPECT_EQ((*parts)[0].data, "batch");
  EXPECT_FALSE((*parts)[0].has_filename);
  EXPECT_EQ((*parts)[1].name, "file");
  EXPECT_EQ((*parts)[1].filename, "in \"1\".jsonl");
  EXPECT_EQ((*parts)[1].content_type, "application/jsonl");
  EXPECT_EQ((*parts)[1].data, "line1\r\nline2 --XyZ not a boundary\n");
}

TEST(MultipartTest, RejectsMalformedBodies) {
  const std::string ok_part = "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n";
  EXPECT_TRUE(ParseMultipart(ok_part + "--b--", "b").ok());
  EXPECT_FALSE(ParseMultipart(ok_part, "b").ok());                 // no closing boundary
  EXPECT_FALSE(ParseMultipart("no boundary here", "b").ok());
  EXPECT_FALSE(ParseMultipart("--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--", "b").ok());  // no disposition
  EXPECT_FALSE(ParseMultipart("--b\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--b--", "b").ok());
  EXPECT_FALSE(ParseMultipart("--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--", "b").ok());
  EXPECT_FALSE(ParseMultipart("--b\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n--b--", "b").ok());
  EXPECT_FALSE(ParseMultipart("--b\r\n" + std::string(9000, 'h') + "\r\n\r\nx\r\n--b--", "b").ok());
  EXPECT_FALSE(ParseMultipart("--bjunk", "b").ok());
}

TEST(MultipartTest, ParsesQueries) {
  auto q = ParseQuery("/v1/files?purpose=batch&limit=2&after=file-1&x=a%20b+c&flag");
  EXPECT_EQ(q["purpose"], "batch");
  EXPECT_EQ(q["limit"], "2");
  EXPECT_EQ(q["after"], "file-1");
  EXPECT_EQ(q["x"], "a b c");
  EXPECT_EQ(q.count("flag"), 1u);
  EXPECT_TRUE(ParseQuery("/v1/files").empty());
}

}  // namespace
}  // namespace ferry::serve
