#!/bin/sh
# The main job: install dependencies, build, and run the demo on 4 local
# workers: examples/fashion_mnist_dp (TorchOpt's data-parallel recipe over
# RPC and distributed autograd, one epoch of Fashion-MNIST).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/scripts/install-deps.sh"
sh "$top/scripts/build.sh"
cd "$top/build"
make examples/fashion_mnist_dp >/dev/null
exec ./tools/todist-run -n 4 ./examples/fashion_mnist_dp "$@"
