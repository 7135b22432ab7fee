module github.com/policyflow/policyflow/schemas

go 1.26
