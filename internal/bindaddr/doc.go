// Package bindaddr checks the listen addresses gpudra's servers take as flags (host:port),
// so that a bad one is refused at start, naming the flag and what it accepts, instead of
// failing later when the server listens.
package bindaddr
