package gang

// SkipExhaustedNodes sets whether planning passes over exhausted nodes; it returns a
// function that restores the setting.
func SkipExhaustedNodes(on bool) (restore func()) {
	was := skipExhaustedNodes
	skipExhaustedNodes = on
	return func() { skipExhaustedNodes = was }
}
