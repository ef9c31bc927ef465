"""visus benchmarks: each ``bench_<name>.py`` has ``main() -> None`` printing its figures."""
