#include "test_util.h"

namespace zero::test {

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> communicator = make_mpi_communicator();
  return communicator;
}

}  // namespace zero::test
