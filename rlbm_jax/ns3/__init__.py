"""The ns-3.37 reference: the dumbbell scenario's C++ source and build script (`scenario/`,
package data) and the harness that builds it, runs it over cells and seeds, drives an
exported policy in lock-step and reads its records back as the simulator's (`harness`)."""
