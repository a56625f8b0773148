# Makefile — PGXS build of the cagra extension (C++17).
#
#   make && make install     build and install the extension
#   make installcheck        pg_regress against a running, installed server
#   make check               every test layer (GoogleTest, pg_regress, TAP):
#                            runs test/run-tests.sh, on its own
#
# The GPU library is not linked here: only the worker process opens it at run
# time, so backends and GPU-less servers never load CUDA.

PG_CONFIG ?= pg_config

ifneq ($(filter check,$(MAKECMDGOALS)),)
# PGXS defines a `check` target that only says it is unsupported.  Rather than
# override its recipe (a make warning), `make check` skips PGXS altogether and
# hands over to the test runner, which builds and installs by itself.
ifneq ($(strip $(MAKECMDGOALS)),check)
$(error run "make check" on its own: it builds, installs and tests everything)
endif
.PHONY: check
check:
	PG_CONFIG="$(PG_CONFIG)" bash test/run-tests.sh

else

EXTENSION = cagra
EXTVERSION = 0.1.0
MODULE_big = cagra
# Every folder of src/ (docs/architecture.md); test-only code lives in test/.
OBJS = $(patsubst %.cpp,%.o,$(wildcard src/*.cpp src/*/*.cpp))

# The install script: the type first (later parts refer to it), then the rest
# in name order.
INSTALL_PARTS = sql/install/vector.sql $(sort $(filter-out sql/install/vector.sql,$(wildcard sql/install/*.sql)))
DATA_built = $(EXTENSION)--$(EXTVERSION).sql

REGRESS = $(patsubst sql/%.sql,%,$(wildcard sql/*.sql))
# sql/pgvector.sql runs cagra beside the real pgvector: left out where that
# is not installed (`make installcheck` of a package's user)
ifeq ($(wildcard $(shell $(PG_CONFIG) --sharedir)/extension/vector.control),)
REGRESS := $(filter-out pgvector,$(REGRESS))
endif

# -Wno-register: PostgreSQL 15 headers (port/atomics) use `register`, which
# C++17 removed.
PG_CPPFLAGS = -I$(CURDIR)/src -I$(CURDIR)
PG_CXXFLAGS = -std=c++17 -O2 -fPIC -march=x86-64-v2 -Wno-register
# The graph library at -O3, as CMake's Release build of the benchmarks and
# tests compiles it: GCC vectorises its loops only there, and at -O2 the
# CPU build of a 200,000 x 256 set took 17% longer and its searches 20-30%
# (docs/core.md).
CORE_OBJS = $(patsubst %.cpp,%.o,$(wildcard src/core/*.cpp))
SHLIB_LINK = -lstdc++ -lpthread

# No bitcode: it only serves JIT inlining, and the GPU machine has no clang
# to make it.  `override` wins over Makefile.global's with_llvm = yes.
override with_llvm := no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

$(CORE_OBJS): override CXXFLAGS += -O3

$(DATA_built): $(INSTALL_PARTS)
	cat $^ > $@

# Objects also depend on the headers they include.  The dependency files go
# to build-pgxs/ (ignored by git), not next to the sources.
CAGRA_DEPDIR = build-pgxs/deps
%.o: %.cpp
	@mkdir -p $(CAGRA_DEPDIR)
	$(CXX) $(CXXFLAGS) $(CPPFLAGS) -MMD -MP -MF $(CAGRA_DEPDIR)/$(subst /,_,$*).d -c -o $@ $<
-include $(wildcard $(CAGRA_DEPDIR)/*.d)

EXTRA_CLEAN = build-pgxs

# The GPU library, when CMake has built it (build/gpu/), is installed next to
# cagra.so, where cagra.gpu_library looks by default.  Only the worker
# process opens it; nothing here links it.
CAGRA_GPU_LIB = $(wildcard build/gpu/libcagra_gpu.so)
ifneq ($(CAGRA_GPU_LIB),)
.PHONY: install-gpu-lib uninstall-gpu-lib
install: install-gpu-lib
install-gpu-lib: installdirs
	$(INSTALL_SHLIB) $(CAGRA_GPU_LIB) '$(DESTDIR)$(pkglibdir)/'
uninstall: uninstall-gpu-lib
uninstall-gpu-lib:
	rm -f '$(DESTDIR)$(pkglibdir)/libcagra_gpu.so'
endif

endif
