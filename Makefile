# Thin wrapper around CMake.  The two commands a newcomer needs:
#   make demo    install missing Debian packages, build, run `ectier demo`
#   make check   install missing Debian packages, build, run every test
# Sanitizer builds: make check-asan (address+undefined), make check-tsan.
# WERROR=1 turns warnings into errors (CI sets it).

BUILD ?= build
JOBS ?= $(shell nproc)
WERROR ?= 0
CMAKE_FLAGS ?=
WERROR_FLAG := $(if $(filter 1,$(WERROR)),-DECT_WERROR=ON,)

.PHONY: all deps build check demo check-asan check-tsan fuzz format install clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) $(WERROR_FLAG) $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

check: build
	tests/run-tests.sh $(BUILD)

demo: build
	$(BUILD)/ectier demo

check-asan: deps
	cmake -S . -B build-asan -DECT_SANITIZE=address,undefined -DECT_WITH_CUDA=OFF $(WERROR_FLAG) >/dev/null
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 UCX_MEM_EVENTS=no \
	    ECT_TEST_TIMEOUT=300 tests/run-tests.sh build-asan

check-tsan: deps
	cmake -S . -B build-tsan -DECT_SANITIZE=thread -DECT_WITH_CUDA=OFF $(WERROR_FLAG) >/dev/null
	cmake --build build-tsan -j $(JOBS)
	# UCX_MEM_EVENTS=no: libucm (linked into every test through the P2P libs)
	# hooks madvise, which glibc calls as a thread exits; under TSan that hook
	# crashes the exiting thread.  No test relies on UCX memory events.
	UCX_MEM_EVENTS=no TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1 \
	    ECT_TEST_TIMEOUT=300 \
	    tests/run-tests.sh build-tsan

fuzz:
	@scripts/install-deps.sh --fuzz
	CC=clang cmake -S . -B build-fuzz -DECT_FUZZ=ON -DECT_WITH_CUDA=OFF \
	    -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link,address,undefined >/dev/null
	cmake --build build-fuzz -j $(JOBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

install: build
	cmake --install $(BUILD)

clean:
	rm -rf build build-asan build-tsan build-fuzz
