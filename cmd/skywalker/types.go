package main

import "skywalker/internal/workload"

type (
	workloadSource  = workload.Source
	workloadArrival = workload.Arrival
)
