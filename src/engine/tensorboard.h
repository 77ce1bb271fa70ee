// TensorBoard event files (the `tensorboard` config section; see EngineMonitor).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zero {

/// Whether zero was built with protobuf, which writes the event records.
bool tensorboard_available();

/// One event file, events.out.tfevents.SECONDS.HOST.PID in a directory: TFRecord framing (a
/// little-endian uint64 length, its masked CRC-32C, the Event message, the message's masked
/// CRC-32C), the first record the file version. Each record is written to the file at once,
/// so a crash loses at most the record being written. Not thread-safe.
class TensorBoardWriter {
 public:
  /// Creates `dir` (and its parents) and the file; throws zero::Error naming the path.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// A scalar summary `tag` = `value` at `step` (x axis), stamped with the wall time.
  void scalar(const std::string& tag, double value, int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);

  std::string path_;
  int fd_ = -1;
};

}  // namespace zero
