//go:build !linux

package worker

// LowerPriority does nothing outside Linux (the worker is deployed on Linux).
func LowerPriority(nice int) error { return nil }
