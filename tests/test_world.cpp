#include "test_util.h"
#include "zero/comm_mpi.h"

#include <filesystem>

namespace zero::test {

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> communicator = make_mpi_communicator();
  return communicator;
}

std::string shared_temp_dir(const std::string& name) {
  auto comm = world();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("zero-" + name + "-np" + std::to_string(comm->size()));
  if (comm->rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  comm->barrier()->wait();
  return dir.string();
}

}  // namespace zero::test
