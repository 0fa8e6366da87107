// Frame codec and body codec tests: round trips, every decode error, and
// truncated input that must wait for more bytes.
#include "net/frame.h"

#include <gtest/gtest.h>

#include "net/messages.h"

namespace granary::net {
namespace {

Result<std::optional<Frame>> DecodeOne(const std::string& bytes, uint32_t max = kMaxPayload) {
  FrameDecoder d(max);
  d.Feed(bytes);
  return d.Next();
}

void ExpectCorruption(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
}

TEST(FrameTest, HeaderIsThirtyTwoBytesStartingWithMagic) {
  std::string h = EncodeFrameHeader(Op::kPing, 0, 7, 0, PayloadChecksum(""));
  ASSERT_EQ(h.size(), kFrameHeaderSize);
  EXPECT_EQ(h.substr(0, 4), "GRNY");
  EXPECT_EQ(h[4], kProtocolVersion);
  EXPECT_EQ(h[5], static_cast<char>(Op::kPing));
  EXPECT_EQ(h[8], 7);
}

TEST(FrameTest, RoundTripsFedAtOnceAndByteByByte) {
  std::string wire = EncodeFrame(Op::kGetBlock, 1, "first") + EncodeFrame(Op::kPing, 2, "") +
                     EncodeFrame(Op::kBlock, 1ull << 40, std::string(100000, 'x'));
  for (bool byte_by_byte : {false, true}) {
    FrameDecoder d;
    std::vector<Frame> got;
    auto drain = [&] {
      for (;;) {
        auto f = d.Next();
        ASSERT_TRUE(f.ok()) << f.status().ToString();
        if (!*f) return;
        got.push_back(std::move(**f));
      }
    };
    if (byte_by_byte) {
      for (char c : wire) {
        d.Feed(std::string_view(&c, 1));
        drain();
      }
    } else {
      d.Feed(wire);
      drain();
    }
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].op, Op::kGetBlock);
    EXPECT_EQ(got[0].request_id, 1u);
    EXPECT_EQ(got[0].payload, "first");
    EXPECT_EQ(got[1].op, Op::kPing);
    EXPECT_EQ(got[1].payload, "");
    EXPECT_EQ(got[2].request_id, 1ull << 40);
    EXPECT_EQ(got[2].payload, std::string(100000, 'x'));
    EXPECT_EQ(d.buffered(), 0u);
  }
}

TEST(FrameTest, TruncatedInputWaitsForMore) {
  std::string wire = EncodeFrame(Op::kStatusReply, 9, "{\"ok\":true}");
  FrameDecoder d;
  d.Feed(wire.substr(0, kFrameHeaderSize - 1));
  auto f = d.Next();
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->has_value());
  EXPECT_TRUE(d.mid_frame());
  d.Feed(wire.substr(kFrameHeaderSize - 1, 5));  // header done, payload partial
  f = d.Next();
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->has_value());
  d.Feed(wire.substr(kFrameHeaderSize + 4));
  f = d.Next();
  ASSERT_TRUE(f.ok() && f->has_value());
  EXPECT_EQ((*f)->payload, "{\"ok\":true}");
}

TEST(FrameTest, BadMagic) {
  std::string wire = EncodeFrame(Op::kPing, 1, "");
  wire[0] = 'X';
  ExpectCorruption(DecodeOne(wire).status(), "bad frame magic");
  // Detected from the first four bytes, before the header is complete.
  ExpectCorruption(DecodeOne("HTTP").status(), "bad frame magic");
}

TEST(FrameTest, BadVersion) {
  std::string wire = EncodeFrame(Op::kPing, 1, "");
  wire[4] = 3;
  ExpectCorruption(DecodeOne(wire).status(), "unsupported peer protocol version 3");
}

TEST(FrameTest, LengthOverLimit) {
  std::string header = EncodeFrameHeader(Op::kBlock, 0, 1, kMaxPayload + 1, 0);
  ExpectCorruption(DecodeOne(header).status(), "over the limit of 67108864 bytes");
  ExpectCorruption(DecodeOne(EncodeFrame(Op::kBlock, 1, std::string(17, 'a')), 16).status(),
                   "length 17 over the limit of 16");
}

TEST(FrameTest, HeaderChecksum) {
  std::string wire = EncodeFrame(Op::kPing, 1, "");
  wire[9] ^= 1;  // request id
  ExpectCorruption(DecodeOne(wire).status(), "header checksum mismatch");
}

TEST(FrameTest, PayloadChecksum) {
  std::string wire = EncodeFrame(Op::kBlock, 1, "payload bytes");
  wire.back() ^= 0x40;
  FrameDecoder d;
  d.Feed(wire);
  ExpectCorruption(d.Next().status(), "payload checksum mismatch");
  EXPECT_TRUE(d.payload_checksum_failed());
}

TEST(FrameTest, UnknownOpAndReservedFlags) {
  ExpectCorruption(
      DecodeOne(EncodeFrameHeader(static_cast<Op>(99), 0, 1, 0, PayloadChecksum(""))).status(),
      "unknown frame op 99");
  ExpectCorruption(DecodeOne(EncodeFrameHeader(Op::kPing, 4, 1, 0, PayloadChecksum(""))).status(),
                   "reserved frame flags");
}

TEST(FrameTest, ErrorIsSticky) {
  FrameDecoder d;
  d.Feed("garbage!");
  ASSERT_FALSE(d.Next().ok());
  d.Feed(EncodeFrame(Op::kPing, 1, ""));
  ExpectCorruption(d.Next().status(), "bad frame magic");
}

// Every strict prefix of a valid body fails with Corruption naming the body.
template <typename Decode>
void ExpectPrefixesRejected(const std::string& body, Decode decode, const std::string& name) {
  for (size_t n = 0; n < body.size(); ++n) {
    Status s = decode(body.substr(0, n));
    EXPECT_EQ(s.code(), Code::kCorruption) << name << " prefix " << n;
    EXPECT_NE(s.message().find(name + " body"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(decode(body + "x").code(), Code::kCorruption) << name << ": trailing byte accepted";
}

BlockRequest SampleRequest() {
  return BlockRequest{.dataset = "ds",
                      .key = "dir/obj.bin",
                      .etag = "\"abc\"",
                      .size = 10 << 20,
                      .block = 2,
                      .offset = 8 << 20,
                      .length = 2 << 20};
}

TEST(BodyTest, RoundTrips) {
  HelloBody hello{.version = kProtocolVersion,
                  .mode = AuthMode::kHmacSha256,
                  .server_nonce = {1, 2, 3},
                  .node_id = "node-a",
                  .dataset = "ds"};
  EXPECT_EQ(*DecodeHello(EncodeHello(hello)), hello);
  AuthBody auth{.mode = AuthMode::kNone,
                .client_nonce = {9},
                .proof = {7, 7},
                .dataset = "ds",
                .node_id = "node-b"};
  EXPECT_EQ(*DecodeAuth(EncodeAuth(auth)), auth);
  AuthOkBody ok{.proof = {5}};
  EXPECT_EQ(*DecodeAuthOk(EncodeAuthOk(ok)), ok);
  EXPECT_EQ(*DecodeBlockRequest(EncodeBlockRequest(SampleRequest()), Op::kGetBlock),
            SampleRequest());
  EXPECT_TRUE(*DecodeWarmDone(EncodeWarmDone(true)));
  EXPECT_FALSE(*DecodeWarmDone(EncodeWarmDone(false)));
  auto e = DecodeError(EncodeError(Stale("etag changed")));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->code, Code::kStale);
  EXPECT_EQ(e->message, "etag changed");
  EXPECT_TRUE(DecodeEmpty("", Op::kPing).ok());
  EXPECT_TRUE(DecodeStatusReply("{}").ok());
}

TEST(BodyTest, TruncatedBodiesRejected) {
  HelloBody hello{.node_id = "n", .dataset = "ds"};
  ExpectPrefixesRejected(
      EncodeHello(hello), [](auto b) { return DecodeHello(b).status(); }, "hello");
  ExpectPrefixesRejected(
      EncodeAuth(AuthBody{.dataset = "ds", .node_id = "n"}),
      [](auto b) { return DecodeAuth(b).status(); }, "auth");
  ExpectPrefixesRejected(
      EncodeAuthOk(AuthOkBody{}), [](auto b) { return DecodeAuthOk(b).status(); }, "auth_ok");
  ExpectPrefixesRejected(
      EncodeBlockRequest(SampleRequest()),
      [](auto b) { return DecodeBlockRequest(b, Op::kGetBlock).status(); }, "get_block");
  ExpectPrefixesRejected(
      EncodeWarmDone(true), [](auto b) { return DecodeWarmDone(b).status(); }, "warm_done");
  ExpectPrefixesRejected(
      EncodeError(NotFound("x")), [](auto b) { return DecodeError(b).status(); }, "error");
}

TEST(BodyTest, OversizedFieldsRejected) {
  BlockRequest r = SampleRequest();
  r.key = std::string(kMaxKeyLength + 1, 'k');
  Status s = DecodeBlockRequest(EncodeBlockRequest(r), Op::kGetBlock).status();
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("field 'key' length 4097 over the limit of 4096"), std::string::npos)
      << s.ToString();
  HelloBody hello{.node_id = std::string(kMaxTokenLength + 1, 'n')};
  s = DecodeHello(EncodeHello(hello)).status();
  EXPECT_NE(s.message().find("field 'node_id'"), std::string::npos) << s.ToString();
  // A length prefix claiming 4 GiB must not be trusted.
  std::string huge = "\xff\xff\xff\xff";
  s = DecodeBlockRequest(huge, Op::kWarm).status();
  EXPECT_NE(s.message().find("field 'dataset' length 4294967295"), std::string::npos)
      << s.ToString();
}

TEST(BodyTest, BadValuesRejected) {
  std::string hello = EncodeHello(HelloBody{});
  hello[2] = 7;  // auth mode
  EXPECT_NE(DecodeHello(hello).status().message().find("auth_mode' unknown value 7"),
            std::string::npos);
  EXPECT_EQ(DecodeWarmDone("\x02").status().code(), Code::kCorruption);
  std::string err = EncodeError(NotFound("x"));
  err[0] = 0;  // Code::kOk is not an error
  EXPECT_NE(DecodeError(err).status().message().find("not an error code: 0"), std::string::npos);
  err[0] = 99;
  EXPECT_EQ(DecodeError(err).status().code(), Code::kCorruption);
  EXPECT_EQ(DecodeEmpty("x", Op::kStatus).code(), Code::kCorruption);
  EXPECT_EQ(DecodeStatusReply("").code(), Code::kCorruption);
  // Our own messages are one line (Status escapes control characters), so a
  // message with a newline in it is refused, not passed on.
  err = EncodeError(NotFound("a b"));
  err[err.size() - 2] = '\n';
  Status bad = DecodeError(err).status();
  EXPECT_EQ(bad.code(), Code::kCorruption);
  EXPECT_NE(bad.message().find("control character (byte 10)"), std::string::npos) << bad.message();
}

TEST(BodyTest, BlockRangeValidated) {
  BlockRequest r = SampleRequest();
  r.length = r.size;  // offset + length past the end
  Status s = DecodeBlockRequest(EncodeBlockRequest(r), Op::kGetBlock).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("past the object's size"), std::string::npos) << s.ToString();
  EXPECT_TRUE(DecodeBlockRequest(EncodeBlockRequest(r), Op::kWarm).ok());  // warm ignores ranges
  r = SampleRequest();
  r.offset = ~0ull;
  EXPECT_EQ(DecodeBlockRequest(EncodeBlockRequest(r), Op::kGetBlock).status().code(),
            Code::kInvalidArgument);
  r = SampleRequest();
  r.key.clear();
  EXPECT_EQ(DecodeBlockRequest(EncodeBlockRequest(r), Op::kWarm).status().code(),
            Code::kInvalidArgument);
}

TEST(BodyTest, LongErrorMessagesAreCut) {
  auto e = DecodeError(EncodeError(Internal(std::string(10000, 'm'))));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->message.size(), kMaxMessageLength);
}

}  // namespace
}  // namespace granary::net
