#include "engine/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/crc32c.h"
#include "common/host.h"
#include "zero/error.h"

#if defined(ZERO_WITH_TENSORBOARD)
#include "tensorboard_event.pb.h"
#endif

namespace zero {
namespace {

// TFRecord's masked CRC: rotated and offset, so a CRC of data holding CRCs stays meaningful.
uint32_t masked_crc(const void* bytes, size_t size) {
  const uint32_t crc = crc32c(bytes, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool tensorboard_available() {
#if defined(ZERO_WITH_TENSORBOARD)
  return true;
#else
  return false;
#endif
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  ZERO_CHECK(tensorboard_available(), "tensorboard: this zero was built without protobuf, which ",
             "writes TensorBoard's event records (Debian: libprotobuf-dev and ",
             "protobuf-compiler; scripts/setup.sh installs them); use csv_monitor");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  ZERO_CHECK(!error, "tensorboard: cannot create directory '", dir, "': ", error.message());
  const auto seconds = static_cast<long long>(now_seconds());
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." +
                                         host_name() + "." + std::to_string(::getpid())))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZERO_CHECK(fd_ >= 0, "tensorboard: cannot create '", path_, "': ", std::strerror(errno));
#if defined(ZERO_WITH_TENSORBOARD)
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_file_version("brain.Event:2");
  write_record(event.SerializeAsString());
#endif
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
#if defined(ZERO_WITH_TENSORBOARD)
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  tensorboard::SummaryValue* item = event.mutable_summary()->add_value();
  item->set_tag(tag);
  item->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
#else
  (void)tag, (void)value, (void)step;
#endif
}

void TensorBoardWriter::write_record(const std::string& bytes) {
  std::string record(8 + 4 + bytes.size() + 4, '\0');
  const uint64_t length = bytes.size();
  std::memcpy(record.data(), &length, 8);  // little-endian hosts only (as safetensors)
  const uint32_t length_crc = masked_crc(&length, 8);
  std::memcpy(record.data() + 8, &length_crc, 4);
  std::memcpy(record.data() + 12, bytes.data(), bytes.size());
  const uint32_t data_crc = masked_crc(bytes.data(), bytes.size());
  std::memcpy(record.data() + 12 + bytes.size(), &data_crc, 4);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ZERO_CHECK(n > 0, "tensorboard: cannot write '", path_, "': ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

}  // namespace zero
