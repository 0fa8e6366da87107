#include "s3_delay_proxy/http_framing.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace granary::bench {
namespace {

constexpr size_t kMaxLine = 8192;

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

Result<RequestHead> ParseRequestHead(std::string_view head) {
  RequestHead out;
  size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) return InvalidArgument("request head without CRLF");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1 || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
    return InvalidArgument("bad request line '" + std::string(line.substr(0, 200)) + "'");
  }
  out.method = std::string(line.substr(0, sp1));
  out.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  for (size_t pos = eol + 2; pos < head.size();) {
    size_t end = head.find("\r\n", pos);
    if (end == std::string_view::npos || end == pos) break;
    std::string_view field = head.substr(pos, end - pos);
    pos = end + 2;
    size_t colon = field.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view name = Trim(field.substr(0, colon)), value = Trim(field.substr(colon + 1));
    if (IEquals(name, "content-length")) {
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), out.content_length);
      if (ec != std::errc() || p != value.data() + value.size()) {
        return InvalidArgument("bad Content-Length '" + std::string(value) + "'");
      }
    } else if (IEquals(name, "transfer-encoding")) {
      std::string lower(value);
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      out.chunked = lower.find("chunked") != std::string::npos;
    }
  }
  return out;
}

BodyFramer::BodyFramer(const RequestHead& head) {
  if (head.chunked) {
    state_ = State::kChunkSize;
  } else {
    remaining_ = head.content_length;
    state_ = remaining_ == 0 ? State::kDone : State::kFixed;
  }
}

Result<size_t> BodyFramer::Consume(std::string_view data) {
  size_t used = 0;
  while (used < data.size() && state_ != State::kDone) {
    std::string_view rest = data.substr(used);
    switch (state_) {
      case State::kFixed:
      case State::kChunkData:
      case State::kChunkCrlf: {
        size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, rest.size()));
        used += n;
        remaining_ -= n;
        if (remaining_ == 0) {
          if (state_ == State::kFixed) {
            state_ = State::kDone;
          } else if (state_ == State::kChunkData) {
            state_ = State::kChunkCrlf;
            remaining_ = 2;
          } else {
            state_ = State::kChunkSize;
          }
        }
        break;
      }
      case State::kChunkSize:
      case State::kTrailer: {
        char c = rest.front();
        ++used;
        if (c != '\n') {
          if (line_.size() >= kMaxLine) return InvalidArgument("chunk line too long");
          line_.push_back(c);
          break;
        }
        std::string_view line = Trim(line_);
        if (state_ == State::kTrailer) {
          if (line.empty()) state_ = State::kDone;
        } else {
          line = line.substr(0, line.find(';'));
          uint64_t size = 0;
          auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
          if (ec != std::errc() || line.empty()) {
            return InvalidArgument("bad chunk size '" + std::string(line) + "'");
          }
          remaining_ = size;
          state_ = size == 0 ? State::kTrailer : State::kChunkData;
        }
        line_.clear();
        break;
      }
      case State::kDone: break;
    }
  }
  return used;
}

}  // namespace granary::bench
