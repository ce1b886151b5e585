// Builders of the ImageNet-era models and the ResNets of the fast recipes (ResNet-D, David
// Page's ResNet-9) (zoo_imagenet.cc); registered in models.cc.
#pragma once

#include <memory>

#include "core/models.h"

namespace colonnade {

std::unique_ptr<Net> BuildZfNet(const ModelOptions& o);
std::unique_ptr<Net> BuildVgg16(const ModelOptions& o);
std::unique_ptr<Net> BuildVgg19(const ModelOptions& o);
std::unique_ptr<Net> BuildGoogLeNet(const ModelOptions& o);
std::unique_ptr<Net> BuildResNet18(const ModelOptions& o);
std::unique_ptr<Net> BuildResNet18Cifar(const ModelOptions& o);
std::unique_ptr<Net> BuildResNet34(const ModelOptions& o);
std::unique_ptr<Net> BuildResNet50(const ModelOptions& o);
std::unique_ptr<Net> BuildResNet152(const ModelOptions& o);
std::unique_ptr<Net> BuildResNet18D(const ModelOptions& o);
std::unique_ptr<Net> BuildResNet50D(const ModelOptions& o);
std::unique_ptr<Net> BuildResNet9(const ModelOptions& o);

}  // namespace colonnade
