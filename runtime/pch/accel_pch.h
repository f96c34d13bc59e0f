// Precompiled header for the translation units that include libtorch.
#include <torch/script.h>
#include <torch/torch.h>
