package config

import "log/slog"

// durationsReadable is v's log value with every duration as a Go duration
// ("720h0m0s", "5s"): the JSON handler renders a slog duration as
// nanoseconds, which is how the settings' own LogValue groups came out.
func durationsReadable(v any) slog.Value { return readable(slog.AnyValue(v)) }

func readable(v slog.Value) slog.Value {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		return slog.StringValue(v.Duration().String())
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]slog.Attr, len(attrs))
		for i, a := range attrs {
			out[i] = slog.Attr{Key: a.Key, Value: readable(a.Value)}
		}
		return slog.GroupValue(out...)
	}
	return v
}
