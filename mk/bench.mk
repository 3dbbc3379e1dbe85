# Benchmarks (bench/*/run, driven by bench/run; `make bench` in the Makefile).
#
#   make bench                  every benchmark, then bench/plot (SVG charts
#                               and the summary against the targets)
#   make bench-quick            the same with 1 s cells (a smoke run)
#   make bench-one BENCH=wake   one benchmark (commit, wake, e2e, consumer,
#                               decode, store, handlers), then bench/plot
#   make bench-plot             redraw the charts from bench/results/*.csv
#
# None of these is part of `make check`.

.PHONY: bench-quick bench-one bench-plot

bench-quick: deps
	$(MAKE) VARIANT=release all
	BENCH_SECONDS=1 bench/run

bench-one: deps
	$(MAKE) VARIANT=release all
	BENCH_ONLY="$(BENCH)" bench/run

bench-plot:
	bench/plot
