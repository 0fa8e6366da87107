// libFuzzer target: arbitrary bytes into the FrameDecoder (whole and in
// chunks) and into every body decoder. Checks that nothing reads out of
// bounds (ASan), that nothing overflows (UBSan), and that every body that
// decodes re-encodes to exactly the same bytes (the encodings are canonical).
//
// Built only with GRANARY_FUZZ=ON and clang; run by scripts/fuzz.sh on the
// seed corpus in fuzz/corpus/frame_fuzz (written by frame_fuzz_seeds.cc).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "net/frame.h"
#include "net/messages.h"

namespace granary::net {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// Decodes `payload` as every body type; each successful decode must round-trip.
void DecodeBodies(std::string_view payload) {
  if (auto h = DecodeHello(payload); h.ok()) Check(EncodeHello(*h) == payload);
  if (auto a = DecodeAuth(payload); a.ok()) Check(EncodeAuth(*a) == payload);
  if (auto o = DecodeAuthOk(payload); o.ok()) Check(EncodeAuthOk(*o) == payload);
  for (Op op : {Op::kGetBlock, Op::kGetCachedBlock, Op::kWarm}) {
    if (auto r = DecodeBlockRequest(payload, op); r.ok()) {
      Check(EncodeBlockRequest(*r) == payload);
      if (op != Op::kWarm) Check(r->offset + r->length <= r->size && r->length <= kMaxPayload);
    }
  }
  if (auto w = DecodeWarmDone(payload); w.ok()) Check(EncodeWarmDone(*w) == payload);
  if (auto e = DecodeError(payload); e.ok()) {
    Check(e->code != Code::kOk);
    Check(EncodeError(Status(e->code, e->message)) == payload);
  }
  DecodeEmpty(payload, Op::kPing).IgnoreError();
  DecodeStatusReply(payload).IgnoreError();
}

// Feeds `in` in chunks of `chunk` bytes; returns the frames' payloads joined.
std::string DecodeFrames(std::string_view in, size_t chunk) {
  FrameDecoder d(1 << 20);
  std::string seen;
  for (size_t pos = 0; pos <= in.size(); pos += chunk) {
    d.Feed(in.substr(pos, chunk));
    for (;;) {
      auto f = d.Next();
      if (!f.ok()) return seen;
      if (!*f) break;
      Check(IsKnownOp(static_cast<uint8_t>((*f)->op)) && (*f)->payload.size() <= (1 << 20));
      DecodeBodies((*f)->payload);
      seen += (*f)->payload;
    }
  }
  return seen;
}

}  // namespace
}  // namespace granary::net

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace granary::net;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string whole = DecodeFrames(in, in.size() + 1);
  // Chunking must not change what is decoded.
  size_t chunk = size > 0 ? 1 + static_cast<uint8_t>(in[0]) % 64 : 1;
  Check(DecodeFrames(in, chunk) == whole);
  DecodeBodies(in);
  return 0;
}
