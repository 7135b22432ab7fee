module github.com/policyflow/policyflow/events

go 1.26

require (
	github.com/hamba/avro/v2 v2.31.0
	github.com/modern-go/reflect2 v1.0.2
	github.com/policyflow/policyflow/schemas v0.0.0-00010101000000-000000000000
	github.com/policyflow/policyflow/topology v0.0.0-00010101000000-000000000000
)

require (
	github.com/go-viper/mapstructure/v2 v2.4.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go v1.22.2 // indirect
	github.com/twmb/franz-go/pkg/kadm v1.19.0 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.0 // indirect
)

replace github.com/policyflow/policyflow/schemas => ../schemas

replace github.com/policyflow/policyflow/topology => ../topology
