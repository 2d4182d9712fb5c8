package report

import "errors"

// Tee returns a Writer that writes every record to each of ws, in order.
// A failing writer does not stop the others; the errors are joined.
func Tee(ws ...Writer) Writer { return tee(ws) }

type tee []Writer

func (t tee) Start(s Start) error {
	var errs []error
	for _, w := range t {
		errs = append(errs, w.Start(s))
	}
	return errors.Join(errs...)
}

func (t tee) Escape(e Event) error {
	var errs []error
	for _, w := range t {
		errs = append(errs, w.Escape(e))
	}
	return errors.Join(errs...)
}

func (t tee) Open(e Event) error {
	var errs []error
	for _, w := range t {
		errs = append(errs, w.Open(e))
	}
	return errors.Join(errs...)
}

func (t tee) Progress(p Progress) error {
	var errs []error
	for _, w := range t {
		errs = append(errs, w.Progress(p))
	}
	return errors.Join(errs...)
}

func (t tee) Summary(s Summary) error {
	var errs []error
	for _, w := range t {
		errs = append(errs, w.Summary(s))
	}
	return errors.Join(errs...)
}
