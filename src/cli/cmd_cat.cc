// `granary cat URI...`: writes objects to stdout, byte-exact, one after another.
//
// Each object is read in chunks of --chunk-size (default 8 MiB), up to
// --parallel (default 4) ranged reads in flight while earlier chunks are
// written in order, so a remote object streams at several times the origin's
// single-request rate with memory bounded by parallel x chunk.
// An object that shrinks while being read is an error (the output would be
// silently truncated otherwise).
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <future>
#include <vector>

#include "cli/commands.h"
#include "common/units.h"

namespace granary::cli {
namespace {

struct CatFlags {
  std::vector<std::string> uris;
  std::string chunk_size = "8MiB";
  int parallel = 4;
};

Status WriteAll(std::span<const char> data) {
  while (!data.empty()) {
    ssize_t n = ::write(STDOUT_FILENO, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("stdout", errno);
    }
    data = data.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status CatOne(const Location& loc, uint64_t chunk, size_t depth) {
  UnderStorage& ufs = *loc.ufs;
  const std::string& key = loc.uri.key;
  ASSIGN_OR_RETURN(ObjectInfo info, ufs.Stat(key));
  const size_t buf_size = static_cast<size_t>(std::min(chunk, info.size));
  // Declared before `inflight` so that the reads (which borrow the buffers)
  // are waited for before the buffers go away, on every return path.
  std::vector<std::vector<char>> bufs(depth, std::vector<char>(buf_size));
  std::deque<std::future<Result<size_t>>> inflight;
  uint64_t next_offset = 0;  // of the next chunk to fetch
  size_t next_chunk = 0;
  auto launch = [&] {
    size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, info.size - next_offset));
    std::span<char> out(bufs[next_chunk % depth].data(), len);
    inflight.push_back(std::async(std::launch::async, [&ufs, &key, offset = next_offset, out] {
      return ufs.Read(key, offset, out);
    }));
    next_offset += len;
    ++next_chunk;
  };
  while (inflight.size() < depth && next_offset < info.size) launch();
  uint64_t written = 0;
  for (size_t chunk_index = 0; !inflight.empty(); ++chunk_index) {
    Result<size_t> got = inflight.front().get();
    inflight.pop_front();
    if (!got.ok()) return got.status();
    size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, info.size - written));
    if (*got < want) {
      return IoError("object changed while reading: ended at byte " +
                     std::to_string(written + *got) + " of " + std::to_string(info.size));
    }
    RETURN_IF_ERROR(WriteAll(std::span<const char>(bufs[chunk_index % depth].data(), *got)));
    written += *got;
    if (next_offset < info.size) launch();  // reuses the buffer just written
  }
  return Status::Ok();
}

int RunCat(const CatFlags& flags, const GlobalFlags& globals) {
  auto chunk = ParseSize(flags.chunk_size);
  if (!chunk.ok() || *chunk == 0) {
    return ReportError("--chunk-size",
                       chunk.ok() ? InvalidArgument("must be > 0") : chunk.status());
  }
  for (const std::string& text : flags.uris) {
    auto loc = OpenLocation(text, globals);
    if (!loc.ok()) return ReportError(text, loc.status());
    if (Status s = CatOne(*loc, *chunk, static_cast<size_t>(flags.parallel)); !s.ok()) {
      return ReportError(text, s);
    }
  }
  return kExitOk;
}

}  // namespace

void RegisterCatCommand(CLI::App& app, CliContext& ctx) {
  auto flags = std::make_shared<CatFlags>();
  CLI::App* cmd = app.add_subcommand("cat", "Write objects to stdout, byte-exact");
  cmd->add_option("URI", flags->uris,
                  "s3://bucket/key, http(s)://host/path, file:///path or a path")
      ->required();
  cmd->add_option("--chunk-size", flags->chunk_size, "Bytes per read request (e.g. 8MiB)")
      ->capture_default_str();
  cmd->add_option("--parallel", flags->parallel,
                  "Chunks fetched at once (memory: parallel x chunk)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->callback(
      [&ctx, flags] { ctx.action = [&ctx, flags] { return RunCat(*flags, ctx.flags); }; });
}

}  // namespace granary::cli
