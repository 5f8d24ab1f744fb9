"""Benchmark peer standing in for function-kcl: a crossplane-function-sdk-python
server that evaluates metalplane.k with kcl-lib on every request."""
import json
import os

import click
import kcl_lib.api as kapi
from crossplane.function import cli as sdkcli, logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

API = kapi.API()
SOURCE = open(os.path.join(os.path.dirname(__file__), "metalplane.k")).read()


class Runner(grpcv1.FunctionRunnerServiceServicer):
    def __init__(self):
        self.log = logging.get_logger()

    async def RunFunction(self, req, _ctx):
        rsp = response.to(req)
        params = {"oxr": resource.struct_to_dict(req.observed.composite.resource),
                  "ocds": {k: resource.struct_to_dict(v.resource) for k, v in req.observed.resources.items()}}
        r = API.exec_program(kapi.ExecProgramArgs(k_filename_list=["main.k"], k_code_list=[SOURCE],
                             args=[kapi.Argument(name="params", value=json.dumps(params))]))
        if r.err_message:
            response.fatal(rsp, r.err_message)
            return rsp
        out = json.loads(r.json_result)
        for name, o in out["items"].items():
            resource.update(rsp.desired.resources[name], o)
            rsp.desired.resources[name].ready = fnv1.READY_FALSE
        resource.update(rsp.desired.composite, {"status": out["status"]})
        return rsp


@click.command()
@sdkcli.standard_options
def cli(**kw):
    sdkcli.run(Runner(), **kw)


if __name__ == "__main__":
    cli()
