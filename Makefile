# The two commands a new user needs: `make demo` and `make test`. Both install missing
# Debian packages first (make deps), then build with Bazel (offline).
BAZEL ?= bazel
BINARIES := //coordinator //worker //coordinator/cli:trainctl

.PHONY: deps build test demo image test-asan test-tsan format clean

deps:
	@tools/install_deps.sh

build: deps
	$(BAZEL) build //...

test: deps
	@tools/run_tests.sh

demo: deps
	$(BAZEL) build $(BINARIES)
	@deploy/local/demo.sh

# A container image with Debian's podman, from this checkout's binaries on a Debian 12
# base made here by debootstrap (deploy/docker/build_image.sh; docs/DEPLOY.md):
# localhost/mtrain-cpu:dev. IMAGE_FLAVOR=cuda builds localhost/mtrain-cuda:dev on NVIDIA's
# CUDA image (IMAGE_FLAGS=--runtime_base=cuda-standin where its registry is out of reach).
IMAGE_FLAVOR ?= cpu
IMAGE_FLAGS ?=
image: deps
	$(BAZEL) build $(BINARIES) //worker:train
	@deploy/docker/build_image.sh --flavor=$(IMAGE_FLAVOR) $(IMAGE_FLAGS)

# The whole tree under AddressSanitizer + UndefinedBehaviorSanitizer, and ThreadSanitizer.
# Every target is built; `large` tests (long training runs, 10x slower when instrumented)
# are left out: the same code paths run in the smaller engine tests.
test-asan: deps
	@tools/run_tests.sh --config=asan --test_size_filters=-large,-enormous

test-tsan: deps
	@tools/run_tests.sh --config=tsan --test_size_filters=-large,-enormous \
	  --test_env=TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tools/tsan.supp

format:
	@git ls-files '*.cc' '*.h' '*.cu' '*.proto' | xargs clang-format -i

clean:
	$(BAZEL) clean
	rm -rf build
