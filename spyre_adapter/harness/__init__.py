"""What the tools share when they drive the device: the compile-and-compare
harness, memory and timing measurements, console output. Nothing in the
backend imports it."""
