// Package hook is the kubelet plugin's crash-injection seam: a Hook is called at each
// named point of prepare and unprepare, in the core and in the checkpoint store, so
// that tests can kill the plugin there or make the step fail.
package hook

// Hook is called at each named point of prepare and unprepare. Tests use it to inject
// crashes (panic, then start a fresh plugin on the same directories) or failures.
type Hook func(point string) error

// At calls h at point; a nil Hook lets everything through.
func (h Hook) At(point string) error {
	if h == nil {
		return nil
	}
	return h(point)
}
