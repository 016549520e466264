"""`python -m bench`: run the benchmark (see `bench.run`)."""
from bench.run import main

main()
