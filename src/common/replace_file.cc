#include "common/replace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace granary {

Status ReplaceFileContents(const std::string& path, std::string_view text,
                           ReplaceFileOptions options) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, options.mode);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  int err = 0;
  for (size_t done = 0; done < text.size() && err == 0;) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      err = errno;
    }
  }
  if (err == 0 && options.durable && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return ErrnoStatus("write " + path, err);
  }
  return Status::Ok();
}

}  // namespace granary
