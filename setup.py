"""The one compiled part: datakit._jpegregion, a JPEG region decoder on the system libjpeg-turbo.

It is optional: without a C compiler or libjpeg-turbo's headers (``libjpeg-turbo8-dev`` /
``libjpeg62-turbo-dev`` / ``libjpeg-turbo-devel``) the build goes on without it and the
pipelines decode whole images at the DCT scale the crop needs, as before.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "datakit._jpegregion",
            ["datakit/_jpegregion.c"],
            libraries=["jpeg"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
