"""wbcore-otel: OpenTelemetry traces of wbcore's seams, exported over OTLP when configured."""
