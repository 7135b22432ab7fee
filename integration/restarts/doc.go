// Package restarts runs the policy flow's stages as processes of their own
// (the binaries of this checkout) against the chosen backend's Kafka and
// Consul, and checks what components see when a stage is stopped, or
// killed (SIGKILL) in the middle of its work, and started again: Consul
// ends at the newest version, no update is lost, no notification whose
// run completed runs again, and nothing goes backwards.
package restarts
