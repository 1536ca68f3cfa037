# tests of the Python package and the c10d backend "todist" (torch is
# optional: without it the backend tests skip; the launcher's Python modes
# need only a python3)
TESTS += tests/torch/test_torch_backend.sh tests/torch/test_run_python.sh
EXTRA_DIST += tests/torch/test_torch_backend.sh tests/torch/backend_peer.py \
	tests/torch/test_run_python.sh
TESTS += tests/torch/test_torch_ddp_example.sh
EXTRA_DIST += tests/torch/test_torch_ddp_example.sh examples/torch_ddp.py \
	bench/torch_backend.sh bench/torch_backend.py
TESTS += tests/torch/test_torch_works.sh
EXTRA_DIST += tests/torch/test_torch_works.sh tests/torch/works_peer.py \
	tests/torch/torch_env.sh
TESTS += tests/torch/test_python_install.sh
EXTRA_DIST += tests/torch/test_python_install.sh
