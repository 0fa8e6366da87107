// Writes the fuzz seed corpus: one file per valid frame of every op (bodies
// filled with typical values), plus each body on its own, so the fuzzer
// starts from inputs that get past the checksums and length prefixes.
//
// Usage: frame_fuzz_seeds fuzz/corpus/frame_fuzz
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "net/frame.h"
#include "net/messages.h"

int main(int argc, char** argv) {
  using namespace granary::net;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  BlockRequest req{.dataset = "imagenet",
                   .key = "train/n01440764/img_001.JPEG",
                   .etag = "\"9b2cf535f27731c974343645a3985328\"",
                   .size = 110000,
                   .block = 0,
                   .offset = 0,
                   .length = 110000};
  Nonce nonce{};
  for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<uint8_t>(i * 37);
  std::vector<std::pair<std::string, std::pair<Op, std::string>>> bodies = {
      {"hello",
       {Op::kHello, EncodeHello({.version = kProtocolVersion,
                                 .mode = AuthMode::kHmacSha256,
                                 .server_nonce = nonce,
                                 .node_id = "node-a",
                                 .dataset = "imagenet"})}},
      {"auth",
       {Op::kAuth, EncodeAuth({.mode = AuthMode::kHmacSha256,
                               .client_nonce = nonce,
                               .proof = nonce,
                               .dataset = "imagenet",
                               .node_id = "node-b"})}},
      {"auth_ok", {Op::kAuthOk, EncodeAuthOk({.proof = nonce})}},
      {"get_block", {Op::kGetBlock, EncodeBlockRequest(req)}},
      {"get_cached_block", {Op::kGetCachedBlock, EncodeBlockRequest(req)}},
      {"block", {Op::kBlock, std::string(300, 'b')}},
      {"warm", {Op::kWarm, EncodeBlockRequest(req)}},
      {"warm_done", {Op::kWarmDone, EncodeWarmDone(true)}},
      {"status", {Op::kStatus, ""}},
      {"status_reply", {Op::kStatusReply, "{\"node\":\"node-a\",\"cached_bytes\":1234}"}},
      {"error", {Op::kError, EncodeError(granary::Stale("train/x: etag changed"))}},
      {"ping", {Op::kPing, ""}},
      {"pong", {Op::kPong, ""}},
  };
  std::string dir = argv[1];
  std::string pipeline;
  uint64_t id = 1;
  for (const auto& [name, op_body] : bodies) {
    std::string frame = EncodeFrame(op_body.first, id++, op_body.second);
    std::ofstream(dir + "/frame_" + name, std::ios::binary) << frame;
    if (!op_body.second.empty()) {
      std::ofstream(dir + "/body_" + name, std::ios::binary) << op_body.second;
    }
    pipeline += frame;
  }
  std::ofstream(dir + "/frames_all", std::ios::binary) << pipeline;
  return 0;
}
