// Writes a small TorchScript model for the digits without any Python: libtorch's C++ API
// registers the parameters and compiles the forward from TorchScript source, then saves
// the module as torch.jit.save would. examples/c/finetune_torchscript.c fine-tunes it.
//
//   make_torchscript_model OUT.pt [--seed N]
#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << "usage: " << argv[0] << " OUT.pt [--seed N]\n";
    return 0;
  }
  if (argc < 2 || argv[1][0] == '-' || (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--seed"))) {
    std::cerr << "usage: " << argv[0] << " OUT.pt [--seed N]\n";
    return 2;
  }
  uint64_t seed = 0;
  if (argc == 4 && std::string(argv[2]) == "--seed") seed = std::strtoull(argv[3], nullptr, 10);
  torch::manual_seed(seed);
  try {
    torch::jit::Module m("DigitsNet");
    auto init = [](int64_t out, int64_t in) {
      double bound = 1.0 / std::sqrt(static_cast<double>(in));
      return std::make_pair(torch::empty({out, in}).uniform_(-bound, bound), torch::empty({out}).uniform_(-bound, bound));
    };
    auto [w1, b1] = init(32, 64);
    auto [w2, b2] = init(10, 32);
    m.register_parameter("fc1_weight", w1, false);
    m.register_parameter("fc1_bias", b1, false);
    m.register_parameter("fc2_weight", w2, false);
    m.register_parameter("fc2_bias", b2, false);
    m.define(R"JIT(
def forward(self, x):
    h = torch.relu(torch.matmul(x, self.fc1_weight.t()) + self.fc1_bias)
    return torch.matmul(h, self.fc2_weight.t()) + self.fc2_bias
)JIT");
    m.save(argv[1]);
  } catch (const c10::Error& e) {
    std::cerr << "cannot build the model: " << e.what_without_backtrace() << "\n";
    return 1;
  }
  std::cout << "wrote " << argv[1] << "\n";
  return 0;
}
