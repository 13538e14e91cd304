# Sourced on the GPU machine before the wgpu binaries run: the Vulkan loader build.sh carried,
# and NVIDIA's Vulkan driver through its EGL library. The container's manifest names the GLX
# one, which without a display returns no vkCreateInstance, so the loader finds no driver.
export LD_LIBRARY_PATH=$PWD/target/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} WGPU_BACKEND=vulkan
if ldconfig -p | grep -q libEGL_nvidia.so.0; then
  printf '{"file_format_version": "1.0.1", "ICD": {"library_path": "libEGL_nvidia.so.0", "api_version": "1.4.312"}}\n' \
    > target/device/nvidia_egl_icd.json
  export VK_DRIVER_FILES=$PWD/target/device/nvidia_egl_icd.json VK_ICD_FILENAMES=$PWD/target/device/nvidia_egl_icd.json
fi
