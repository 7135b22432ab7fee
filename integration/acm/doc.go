// Package acm checks participant replicas (seed 003) on the chosen
// backend: the reference participant's replicas share operations and end
// with identical state, a replica started later rebuilds it from acm.sync
// alone, a killed replica's operation times out and completes on another
// while the registry shows it OFF_LINE, a stuck operation is cancelled by
// the next, and operations for others are ignored.
package acm
