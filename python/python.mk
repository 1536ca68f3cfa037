# python/todist: the Python package (ctypes over libtodist, the c10d
# backend "todist"), installed into $(pythondir) when configure found a
# Python (--with-python). From the build tree:
#   PYTHONPATH=$(top_srcdir)/python TODIST_LIBRARY=$(top_builddir)/.libs/libtodist.so.0
if HAVE_PYTHON
todistpydir = $(pythondir)/todist
todistpy_PYTHON = python/todist/__init__.py python/todist/_lib.py \
	python/todist/backend.py
# Where the installed package finds the installed library.
nodist_todistpy_PYTHON = python/todist/_install.py
python/todist/_install.py: Makefile
	$(AM_V_GEN)$(MKDIR_P) python/todist && \
	  echo "LIBDIR = '$(libdir)'  # written by make: libtodist's install dir" > $@
CLEANFILES += python/todist/_install.py
else
EXTRA_DIST += python/todist/__init__.py python/todist/_lib.py \
	python/todist/backend.py
endif
