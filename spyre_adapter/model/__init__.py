"""The floor under the Spyre scheduler and the emulator: the program format the
scheduler emits and the emulator executes, the DRAM traffic of its
descriptors, the cost of its steps and the timing model. Nothing here imports
the scheduler or the emulator."""
