package sqsconsumer

// wakeup wakes every goroutine waiting for a condition guarded by its
// owner's mutex. The channel is made only when someone waits, so a
// condition nobody waits for costs nothing. All methods are called with
// the owner's mutex held.
type wakeup struct{ ch chan struct{} }

// wait returns the channel to wait on after releasing the mutex; it is
// closed by the next fire.
func (w *wakeup) wait() <-chan struct{} {
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// fire wakes the waiters, if any.
func (w *wakeup) fire() {
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}
